// yoke::Loss: softmax cross-entropy of a batch's logits, and backward from
// it.
//
//   ASSIGN_OR_RETURN(yoke::Tensor logits, model.Forward(batch));
//   ASSIGN_OR_RETURN(yoke::Loss loss, yoke::CrossEntropyLoss(logits, batch));
//   RETURN_IF_ERROR(loss.Backward());   // gradients of loss.value()
//
// value() is the MEAN over the batch's samples; Backward() leaves the model
// with the gradient of that mean. In a distributed loop each rank computes
// its own slice's loss; DistributedContext::AllreduceGradients then turns
// the gradients into those of the mean over every rank's samples (not the
// mean of the ranks' means), which is what one process with the whole
// global batch would compute.
//
// Thread-safety: as the model it came from.
#ifndef YOKE_LOSS_H_
#define YOKE_LOSS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "yoke/tensor.h"

namespace yoke {

class Batch;

class Loss {
 public:
  Loss();
  ~Loss();
  Loss(Loss&&) noexcept;
  Loss& operator=(Loss&&) noexcept;

  double value() const;     // mean over the samples (0 for none)
  double sum() const;       // sum over the samples
  int64_t count() const;    // samples
  int64_t correct() const;  // samples whose arg-max logit is the label
  // d(value)/d(logits), (n, K).
  const Tensor& grad() const;

  // Backpropagates through the model whose Forward produced the logits.
  // FAILED_PRECONDITION if the logits did not come from Model::Forward, the
  // model was destroyed, or it has run Forward again since (the gradient
  // would belong to other activations).
  absl::Status Backward();

  struct Impl;  // not part of the API

 private:
  friend absl::StatusOr<Loss> CrossEntropyLoss(const Tensor&, const Batch&);
  friend absl::StatusOr<Loss> CrossEntropyLoss(const Tensor&, const std::vector<int32_t>&);
  std::unique_ptr<Impl> impl_;
};

// Softmax cross-entropy of `logits` (n, K) against the batch's labels.
// INVALID_ARGUMENT if n differs from the batch's size or a label is not in
// [0, K).
absl::StatusOr<Loss> CrossEntropyLoss(const Tensor& logits, const Batch& batch);
absl::StatusOr<Loss> CrossEntropyLoss(const Tensor& logits, const std::vector<int32_t>& labels);

}  // namespace yoke

#endif  // YOKE_LOSS_H_
