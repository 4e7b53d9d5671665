// global_avg_pool: the mean over all spatial positions of each channel.
//
// x: (N, H, W, C) -> y: (N, C). No parameters. Plain loops: the op is memory
// bound and touches each input once.
#ifndef YOKE_ENGINE_LAYERS_GLOBAL_AVG_POOL_H_
#define YOKE_ENGINE_LAYERS_GLOBAL_AVG_POOL_H_

#include "engine/layer.h"

namespace yoke::engine {

class GlobalAvgPoolLayer final : public Layer {
 public:
  const char* type() const override { return "global_avg_pool"; }
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  // x: (N, H, W, C) -> y: (N, C)
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  // dy: (N, C) -> dx: (N, H, W, C) = dy / (H * W) at every position
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;

 private:
  int64_t hw_ = 0, c_ = 0;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_GLOBAL_AVG_POOL_H_
