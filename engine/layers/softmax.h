// softmax: y = exp(x) / sum(exp(x)) over the last dimension.
//
// x: (N, ..., K) -> y: (N, ..., K). Numerically stable: each row subtracts
// its maximum before exponentiating, so logits of any magnitude give finite
// probabilities. No parameters.
//
// For training a classifier prefer the fused softmax_cross_entropy loss on raw
// logits; this layer is for models that need probabilities inside the graph.
//
// Thread-safety: as Layer (one instance per replica).
#ifndef YOKE_ENGINE_LAYERS_SOFTMAX_H_
#define YOKE_ENGINE_LAYERS_SOFTMAX_H_

#include "engine/layer.h"

namespace yoke::engine {

class SoftmaxLayer final : public Layer {
 public:
  const char* type() const override { return "softmax"; }
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  // x: (N, ..., K) -> y: (N, ..., K), each length-K row summing to 1.
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  // dx = y * (dy - sum_k(dy * y)) per row.
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_SOFTMAX_H_
