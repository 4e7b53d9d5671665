// yoke::Evaluate (include/yoke/evaluate.h).
#include "yoke/evaluate.h"

#include <algorithm>

#include "api/internal.h"
#include "common/status.h"
#include "engine/losses/loss.h"

namespace yoke {

absl::StatusOr<EvalResult> Evaluate(Model& model, DataLoader& loader) {
  ASSIGN_OR_RETURN(auto loss, engine::CreateLoss("softmax_cross_entropy"));
  const bool was_training = model.training();
  model.SetTraining(false);
  // Restores the mode on every return path.
  struct Restore {
    Model& m;
    bool training;
    ~Restore() { m.SetTraining(training); }
  } restore{model, was_training};

  RETURN_IF_ERROR(loader.StartEpoch(0));
  EvalResult out;
  double loss_sum = 0;
  int64_t correct = 0;
  Batch batch;
  while (true) {
    ASSIGN_OR_RETURN(bool more, loader.Next(&batch));
    if (!more) break;
    if (batch.size() == 0) continue;
    ASSIGN_OR_RETURN(Tensor logits, model.Forward(batch));
    ASSIGN_OR_RETURN(engine::LossResult r,
                     loss->Compute(Wrap(logits),
                                   engine::Tensor::Wrap(batch.impl()->batch.y.data(),
                                                        {batch.size()}, engine::DType::kI32),
                                   0.0f, nullptr));
    loss_sum += r.loss_sum;
    correct += r.correct;
    out.count += batch.size();
  }
  out.loss = loss_sum / static_cast<double>(std::max<int64_t>(out.count, 1));
  out.accuracy =
      static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(out.count, 1));
  return out;
}

}  // namespace yoke
