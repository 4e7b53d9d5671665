// softmax_cross_entropy: L = -sum_j t_j log softmax(z)_j, fused and
// numerically stable, against the target t = onehot(y) or, with label
// smoothing eps, t = (1 - eps) onehot(y) + eps / K (Szegedy et al. 2016, as
// Keras' and PyTorch's label_smoothing define it).
//
// z: (N, K), y: (N) -> loss_sum = sum_n L_n; dz = scale * (softmax(z) - t).
// Uses the log-sum-exp trick (subtract the row max) so large logits never
// overflow.
#ifndef YOKE_ENGINE_LOSSES_SOFTMAX_CROSS_ENTROPY_H_
#define YOKE_ENGINE_LOSSES_SOFTMAX_CROSS_ENTROPY_H_

#include "engine/losses/loss.h"

namespace yoke::engine {

class SoftmaxCrossEntropy final : public Loss {
 public:
  // label_smoothing: eps in [0, 1) (CreateLoss checks the range).
  explicit SoftmaxCrossEntropy(float label_smoothing = 0.0f) : label_smoothing_(label_smoothing) {}
  const char* name() const override { return "softmax_cross_entropy"; }
  absl::StatusOr<LossResult> Compute(const Tensor& logits, const Tensor& labels, float grad_scale,
                                     Tensor* dlogits) override;

 private:
  const float label_smoothing_;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LOSSES_SOFTMAX_CROSS_ENTROPY_H_
