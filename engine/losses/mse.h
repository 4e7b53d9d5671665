// mse: mean squared error between the logits and the one-hot labels.
//
// z: (N, K), y: (N) -> L_n = (1/K) * sum_j (z_nj - onehot(y_n)_j)^2,
// loss_sum = sum_n L_n, dz_nj = grad_scale * (2/K) * (z_nj - onehot_nj).
// The mean is over classes per example (PyTorch's MSELoss on one-hot targets
// with reduction 'mean' divides by N*K; here the trainer's grad_scale = 1/N
// supplies the 1/N). `correct` counts examples whose arg-max equals the label.
//
// Thread-safety: stateless; Compute may run concurrently on distinct tensors.
#ifndef YOKE_ENGINE_LOSSES_MSE_H_
#define YOKE_ENGINE_LOSSES_MSE_H_

#include "engine/losses/loss.h"

namespace yoke::engine {

class MeanSquaredError final : public Loss {
 public:
  const char* name() const override { return "mse"; }
  // logits: (N, K) f32, labels: (N) i32 -> sum of L_n; dlogits: (N, K).
  absl::StatusOr<LossResult> Compute(const Tensor& logits, const Tensor& labels, float grad_scale,
                                     Tensor* dlogits) override;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LOSSES_MSE_H_
