// softmax_cross_entropy: L = -log softmax(z)[y], fused and numerically stable.
//
// z: (N, K), y: (N) -> loss_sum = sum_n L_n; dz = scale * (softmax(z) - onehot(y)).
// Uses the log-sum-exp trick (subtract the row max) so large logits never
// overflow.
#ifndef YOKE_ENGINE_LOSSES_SOFTMAX_CROSS_ENTROPY_H_
#define YOKE_ENGINE_LOSSES_SOFTMAX_CROSS_ENTROPY_H_

#include "engine/losses/loss.h"

namespace yoke::engine {

class SoftmaxCrossEntropy final : public Loss {
 public:
  const char* name() const override { return "softmax_cross_entropy"; }
  absl::StatusOr<LossResult> Compute(const Tensor& logits, const Tensor& labels,
                                     float grad_scale, Tensor* dlogits) override;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LOSSES_SOFTMAX_CROSS_ENTROPY_H_
