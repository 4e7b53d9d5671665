// Trainer evaluation: the test and validation splits on local replica 0's
// model, and the early-stopping decision drawn from the epoch history.
#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "common/status.h"
#include "data/pipeline.h"
#include "trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace yoke::worker {

using trainer_internal::BatchInput;
using trainer_internal::BatchLabels;
using trainer_internal::OnDevice;

absl::StatusOr<std::pair<double, double>> Trainer::Evaluate() {
  // A pipeline's stages evaluated together (PipelineEvaluate).
  if (pipelined()) return pipeline_eval_[0];
  return EvaluateOn(test_);
}

absl::StatusOr<std::pair<double, double>> Trainer::EvaluateValidation() {
  if (pipelined()) return pipeline_eval_[1];
  return EvaluateOn(validation_);
}

void Trainer::CountForEarlyStopping(const v1::EpochResult& e) {
  const v1::EarlyStoppingSpec& es = spec_.training().early_stopping();
  if (es.monitor().empty()) return;
  // Loss: lower is better; accuracy: higher. An epoch improves on the best
  // so far only by more than min_delta (as Keras' EarlyStopping counts).
  const double sign = absl::EndsWith(es.monitor(), "_loss") ? 1.0 : -1.0;
  double v = 0;
  if (es.monitor() == "validation_loss") v = e.validation_loss();
  if (es.monitor() == "validation_accuracy") v = e.validation_accuracy();
  if (es.monitor() == "test_loss") v = e.test_loss();
  if (es.monitor() == "test_accuracy") v = e.test_accuracy();
  v1::EarlyStoppingState& s = early_stopping_;
  if (s.best_epoch() == 0 || sign * (s.best() - v) > es.min_delta()) {
    s.set_best(v);
    s.set_best_epoch(e.epoch());
    s.set_since(0);
  } else {
    s.set_since(s.since() + 1);
  }
}

Trainer::EarlyStop Trainer::EarlyStopping() const {
  EarlyStop out;
  const v1::EarlyStoppingSpec& es = spec_.training().early_stopping();
  if (es.monitor().empty()) return out;
  out.best_epoch = static_cast<int>(early_stopping_.best_epoch());
  out.stop = out.best_epoch > 0 && early_stopping_.since() >= es.patience();
  return out;
}

int Trainer::EvalBatchSize() const {
  // A pipeline's stages each hold an evaluation batch's activations and two
  // messages of them: by default, a training batch of one pipeline.
  const int default_batch =
      pipelined() ? std::max(1, spec_.training().batch_size() / data_parallel_ranks()) : 500;
  return spec_.training().eval_batch_size() > 0 ? spec_.training().eval_batch_size()
                                                : default_batch;
}

bool Trainer::ReadsLabelsOnly(const Replica& r, const data::Dataset& set) const {
  return pipelined() && r.stage > 0 && !set.may_skip();
}

absl::StatusOr<std::unique_ptr<data::Pipeline>> Trainer::EvalPipeline(
    const std::shared_ptr<data::Dataset>& set, bool labels_only) const {
  data::SamplerOptions so;
  so.batch_size = EvalBatchSize();
  so.seed = spec_.training().seed();
  so.shuffle = false;
  data::PipelineOptions po;
  po.prefetch = 2;
  po.labels_only = labels_only;
  return data::Pipeline::Create(set, so, spec_.data().transform(), /*train=*/false, po);
}

engine::LayerContext Trainer::EvalContext() const {
  engine::LayerContext ctx;
  ctx.training = false;
  ctx.seed = spec_.training().seed();
  ctx.step = step_;
  return ctx;
}

absl::StatusOr<std::pair<double, double>> Trainer::EvaluateOn(
    const std::shared_ptr<data::Dataset>& set) {
  if (!set) return std::make_pair(0.0, 0.0);
  ASSIGN_OR_RETURN(auto pipe, EvalPipeline(set));
  const engine::LayerContext ctx = EvalContext();
  double loss_sum = 0;
  int64_t correct = 0, n = 0;
  while (true) {
    ASSIGN_OR_RETURN(auto batch, pipe->Next());
    if (!batch.has_value()) break;
    if (batch->n == 0) continue;
    Replica& rep = *replicas_[0];
    ASSIGN_OR_RETURN(engine::Tensor x,
                     OnDevice(BatchInput(*batch), rep.device, &rep.x_dev, "the batch's input"));
    ASSIGN_OR_RETURN(engine::Tensor y,
                     OnDevice(BatchLabels(*batch), rep.device, &rep.y_dev, "the batch's labels"));
    ASSIGN_OR_RETURN(engine::Tensor logits, rep.model->Forward(x, ctx));
    ASSIGN_OR_RETURN(engine::LossResult r, rep.loss->Compute(logits, y, 0.0f, nullptr));
    loss_sum += r.loss_sum;
    correct += r.correct;
    n += batch->n;
    pipe->Recycle(std::move(*batch));
  }
  return std::make_pair(loss_sum / std::max<int64_t>(n, 1),
                        static_cast<double>(correct) / std::max<int64_t>(n, 1));
}

}  // namespace yoke::worker
