// max_pool2d and avg_pool2d: window pooling over channels-last images.
//
// x: (N, H, W, C) -> y: (N, H', W', C). Square window `size` (default 2),
// `stride` (default = size), padding "valid" (default) or "same" with the
// conv2d conventions (engine/kernels/cpu/padding.h). Max pooling never picks
// a padded position; average pooling averages only the real inputs of each
// window (PyTorch's count_include_pad=False). No parameters.
//
// Kernels: engine/kernels/cpu/pool.h. A plan (with max pooling's argmax
// workspace) is cached per batch size; Backward uses the workspace of the
// preceding Forward.
#ifndef YOKE_ENGINE_LAYERS_POOL2D_H_
#define YOKE_ENGINE_LAYERS_POOL2D_H_

#include <map>
#include <memory>

#include "engine/kernels/cpu/pool.h"
#include "engine/layer.h"

namespace yoke::engine {

class Pool2dLayer final : public Layer {
 public:
  // Values must already be valid (the registered factories check the spec).
  Pool2dLayer(bool max, int64_t size, int64_t stride, bool same_padding)
      : max_(max), size_(size), stride_(stride), same_(same_padding) {}
  const char* type() const override { return max_ ? "max_pool2d" : "avg_pool2d"; }
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  // x: (N, H, W, C) -> y: (N, H', W', C)
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  // dy: (N, H', W', C) -> dx: (N, H, W, C)
  // Max pooling takes over the backward of the ReLU it reads.
  bool FuseReluBackward() override;
  bool IsTiledMaxPool2x2() const override;
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;

 private:
  bool max_;
  bool relu_backward_ = false;
  int64_t size_, stride_;
  bool same_;
  cpu::Pool2dGeometry geom_;                                   // per-example (n unset)
  std::map<int64_t, std::unique_ptr<cpu::Pool2dPlan>> plans_;  // by StateKey
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_POOL2D_H_
