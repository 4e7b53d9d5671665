// dropout: inverted dropout. In training each element is zeroed with
// probability `rate` and the kept ones are scaled by 1 / (1 - rate), so eval
// (identity) needs no rescaling.
//
// x: (N, ...) -> y: (N, ...). No parameters.
//
// The mask is a pure function of (ctx.seed, ctx.step, ctx.replica, index(),
// element index), drawn from Philox (engine/rng.h): a resumed run reproduces
// every mask from the step number alone, replicas drop different elements,
// and the result does not depend on the thread count. The mask of the last
// training Forward is kept (1 byte per element, per activation set) for
// Backward.
// Limits that keep the counters disjoint: replica and layer index < 65536 and
// fewer than 2^34 elements per tensor; Forward returns OUT_OF_RANGE beyond.
//
// Thread-safety: as Layer (one instance per replica).
#ifndef YOKE_ENGINE_LAYERS_DROPOUT_H_
#define YOKE_ENGINE_LAYERS_DROPOUT_H_

#include "engine/layer.h"

namespace yoke::engine {

class DropoutLayer final : public Layer {
 public:
  // Requires 0 <= rate < 1 (the factory checks the spec).
  explicit DropoutLayer(float rate) : rate_(rate) {}
  const char* type() const override { return "dropout"; }
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  // x: (N, ...) -> y: (N, ...); draws and keeps the mask when ctx.training.
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  // dy: (N, ...) -> dx: (N, ...) through the mask of the preceding Forward.
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;

  // The mask of the last training Forward: (numel,) u8, 1 = kept. Undefined
  // before the first training Forward. For tests.
  const Tensor& mask() const { return masks_[last_set_].mask; }

 private:
  struct Saved {
    Tensor mask;          // (capacity,) u8; grows, never shrinks
    bool masked = false;  // whether the set's last Forward applied the mask
  };
  Saved& SavedFor(const LayerContext& ctx);

  float rate_;
  std::vector<Saved> masks_ = std::vector<Saved>(1);  // per activation set
  int last_set_ = 0;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_DROPOUT_H_
