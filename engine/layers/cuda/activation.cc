// The CUDA activations (relu, leaky_relu, sigmoid, tanh, gelu): the CPU
// ActivationLayer's formulas (engine/layers/activation.h) per element on the
// device, through engine/kernels/cuda/math/activation.h.
#include <cstring>
#include <memory>
#include <utility>

#include "common/status.h"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/layers/cuda/cuda_layer.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine::cuda {
namespace {

ActKind KindOf(const char* type) {
  if (std::strcmp(type, "leaky_relu") == 0) return ActKind::kLeakyRelu;
  if (std::strcmp(type, "sigmoid") == 0) return ActKind::kSigmoid;
  if (std::strcmp(type, "tanh") == 0) return ActKind::kTanh;
  if (std::strcmp(type, "gelu") == 0) return ActKind::kGelu;
  return ActKind::kRelu;
}

class CudaActivationLayer final : public CudaLayer {
 public:
  CudaActivationLayer(std::unique_ptr<Layer> twin, v1::LayerSpec spec)
      : CudaLayer(std::move(twin), std::move(spec)), kind_(KindOf(type())) {
    if (kind_ == ActKind::kLeakyRelu) alpha_ = shapes::LeakyReluAlpha(this->spec().leaky_relu());
  }

  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override {
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(*in[0]));
    return ActivationForward(kind_, alpha_, in[0]->data<float>(), out->data<float>(),
                             in[0]->numel(), dc->stream());
  }

  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override {
    if (din[0] == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(dout));
    return ActivationBackward(kind_, alpha_, in[0]->data<float>(), out.data<float>(),
                              dout.data<float>(), din[0]->data<float>(), dout.numel(),
                              dc->stream());
  }

 private:
  ActKind kind_;
  float alpha_ = 0.0f;
};

}  // namespace

YOKE_REGISTER_DEVICE_LAYER("relu", Device::Kind::kCUDA, CudaFactory<CudaActivationLayer>());
YOKE_REGISTER_DEVICE_LAYER("leaky_relu", Device::Kind::kCUDA, CudaFactory<CudaActivationLayer>());
YOKE_REGISTER_DEVICE_LAYER("sigmoid", Device::Kind::kCUDA, CudaFactory<CudaActivationLayer>());
YOKE_REGISTER_DEVICE_LAYER("tanh", Device::Kind::kCUDA, CudaFactory<CudaActivationLayer>());
YOKE_REGISTER_DEVICE_LAYER("gelu", Device::Kind::kCUDA, CudaFactory<CudaActivationLayer>());

}  // namespace yoke::engine::cuda
