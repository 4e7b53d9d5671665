// Loss: turns logits and labels into a loss value and dL/dlogits.
//
// Losses are registered by their spec name (TrainingSpec.loss). The gradient
// is scaled by `grad_scale`, which the trainer sets to 1 / (global number of
// samples in the step), so that an uneven last batch (or replicas holding
// different numbers of samples) still average exactly.
//
// logits: (N, K) f32; labels: (N) i32 class ids in [0, K).
#ifndef YOKE_ENGINE_LOSSES_LOSS_H_
#define YOKE_ENGINE_LOSSES_LOSS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tensor.h"

namespace yoke::engine {

struct LossResult {
  double loss_sum = 0.0;  // sum over the N examples (not the mean)
  int64_t correct = 0;    // examples whose arg-max logit equals the label
};

class Loss {
 public:
  virtual ~Loss() = default;
  virtual const char* name() const = 0;
  // Computes the loss; when `dlogits` is non-null, overwrites it with
  // grad_scale * d(loss_sum)/dlogits. INVALID_ARGUMENT on a label out of range.
  virtual absl::StatusOr<LossResult> Compute(const Tensor& logits, const Tensor& labels,
                                             float grad_scale, Tensor* dlogits) = 0;
};

// "softmax_cross_entropy" or "mse"; INVALID_ARGUMENT lists the known names.
// `label_smoothing` (TrainingSpec.label_smoothing) must be in [0, 1) and is
// only for softmax_cross_entropy: INVALID_ARGUMENT otherwise. On a device,
// the loss takes logits, labels and dlogits on that device (its
// implementation comes from the device's backend, engine/device_backend.h).
absl::StatusOr<std::unique_ptr<Loss>> CreateLoss(const std::string& name,
                                                 float label_smoothing = 0.0f,
                                                 Device device = Device::CPU());
std::vector<std::string> KnownLosses();

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LOSSES_LOSS_H_
