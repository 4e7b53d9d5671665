// flatten: (N, d1, d2, ...) -> (N, d1*d2*...), keeping channels-last order.
//
// Because activations are channels-last, flattening (N, H, W, C) gives the
// features in (h, w, c) order; a checkpoint converted from a channels-first
// framework must permute its first dense kernel accordingly. No parameters.
//
// Thread-safety: as Layer (one instance per replica).
#ifndef YOKE_ENGINE_LAYERS_FLATTEN_H_
#define YOKE_ENGINE_LAYERS_FLATTEN_H_

#include "engine/layer.h"

namespace yoke::engine {

class FlattenLayer final : public Layer {
 public:
  const char* type() const override { return "flatten"; }
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  // x: (N, d1, ..., dk) -> y: (N, d1*...*dk)
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  // dy: (N, d1*...*dk) -> dx: (N, d1, ..., dk)
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_FLATTEN_H_
