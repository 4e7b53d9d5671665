// Element-wise activations: relu, leaky_relu, sigmoid, tanh, gelu.
//
// x: (N, ...) -> y: (N, ...), same shape; any rank. Registered under the
// LayerSpec field names of the same spelling. No parameters.
//
// These run on every large activation tensor of every step, so the loops are
// single passes that OpenMP splits across threads once the tensor is big
// enough to amortise the fork (see kParallelThreshold in activation.cc).
// Backward reads the output where the derivative is a function of it (relu,
// sigmoid, tanh) and the input otherwise (leaky_relu, gelu).
//
// gelu is the exact form, x * Phi(x) with the normal CDF through erf, as
// PyTorch's default nn.GELU() (not the tanh approximation).
//
// Thread-safety: as Layer (one instance per replica).
#ifndef YOKE_ENGINE_LAYERS_ACTIVATION_H_
#define YOKE_ENGINE_LAYERS_ACTIVATION_H_

#include "engine/layer.h"

namespace yoke::engine {

class ActivationLayer final : public Layer {
 public:
  enum class Kind { kRelu, kLeakyRelu, kSigmoid, kTanh, kGelu };

  // `alpha` is the negative slope and only matters for kLeakyRelu.
  explicit ActivationLayer(Kind kind, float alpha = 0.01f) : kind_(kind), alpha_(alpha) {}

  const char* type() const override;
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  // x: (N, ...) -> y: (N, ...)
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  // dy: (N, ...) -> dx: (N, ...)
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;

 private:
  Kind kind_;
  float alpha_;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_ACTIVATION_H_
