// CudaLayer: the base of every CUDA layer (engine/layers/cuda/).
//
// A CUDA layer keeps its CPU twin, the engine's own layer made from the same
// spec (LayerRegistry::Create(spec, CPU)), and lets it Build: the twin checks
// the input shapes, declares the parameters and state in the ParamSet (the
// same names, shapes, order and initialisation as a CPU model, so
// checkpoints move between devices) and computes the output shape. The CUDA
// layer then runs its own Forward and Backward on device tensors, under the
// contract of engine/layer.h. It reaches its parameters by their position
// among the ones its twin declared.
//
// The twin never runs Forward or Backward on a CUDA model. The model fuses
// nothing on CUDA yet (Model::FuseActivations), so the fusion hooks keep
// their defaults (false).
//
// Thread-safety: as Layer.
#ifndef YOKE_ENGINE_LAYERS_CUDA_CUDA_LAYER_H_
#define YOKE_ENGINE_LAYERS_CUDA_CUDA_LAYER_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kernels/cuda/device_context.h"
#include "engine/layer.h"
#include "engine/registry.h"

namespace yoke::engine::cuda {

class CudaLayer : public Layer {
 public:
  CudaLayer(std::unique_ptr<Layer> cpu_twin, v1::LayerSpec spec)
      : twin_(std::move(cpu_twin)), spec_(std::move(spec)) {}

  const char* type() const override { return twin_->type(); }
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  int64_t ForwardMacsPerExample() const override { return twin_->ForwardMacsPerExample(); }

 protected:
  // The spec this layer was made from, its twin, and what Build saw.
  const v1::LayerSpec& spec() const { return spec_; }
  Layer& twin() const { return *twin_; }
  const std::vector<Shape>& input_shapes() const { return input_shapes_; }
  const Shape& output_shape() const { return output_shape_; }

  // The k-th parameter (state buffer) the twin declared, and its gradient.
  int num_params() const { return num_params_; }
  Tensor param(int k) const { return params_->value(first_param_ + k); }
  Tensor param_grad(int k) const { return params_->grad(first_param_ + k); }
  Tensor state(int k) const { return params_->state(first_state_ + k); }

  // The context of the device `t` lives on (and makes it current).
  static absl::StatusOr<DeviceContext*> Context(const Tensor& t) {
    return ContextFor(t.device().index);
  }

 private:
  std::unique_ptr<Layer> twin_;
  v1::LayerSpec spec_;
  std::vector<Shape> input_shapes_;
  Shape output_shape_;
  int first_param_ = 0, num_params_ = 0, first_state_ = 0;
};

// The factory to register a CudaLayer subclass L, constructed as
// L(std::unique_ptr<Layer> twin, const v1::LayerSpec& spec):
//   YOKE_REGISTER_DEVICE_LAYER("add", Device::Kind::kCUDA, CudaFactory<CudaAddLayer>());
// It creates the CPU twin first, so the spec's values are checked exactly
// as on the CPU.
template <typename L>
LayerFactory CudaFactory() {
  return [](const v1::LayerSpec& spec) -> absl::StatusOr<std::unique_ptr<Layer>> {
    absl::StatusOr<std::unique_ptr<Layer>> twin = LayerRegistry::Global().Create(spec);
    if (!twin.ok()) return twin.status();
    return std::unique_ptr<Layer>(new L(*std::move(twin), spec));
  };
}

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_LAYERS_CUDA_CUDA_LAYER_H_
