// Trainer evaluation: the test split on local replica 0's model.
#include <algorithm>
#include <utility>

#include "common/status.h"
#include "data/pipeline.h"
#include "worker/trainer.h"
#include "worker/trainer_internal.h"

namespace yoke::worker {

using trainer_internal::BatchInput;
using trainer_internal::BatchLabels;

absl::StatusOr<std::pair<double, double>> Trainer::Evaluate() {
  if (!test_) return std::make_pair(0.0, 0.0);
  int64_t bs = spec_.training().eval_batch_size() > 0 ? spec_.training().eval_batch_size()
                                                      : 500;
  data::SamplerOptions so;
  so.batch_size = bs;
  so.seed = spec_.training().seed();
  so.shuffle = false;
  data::PipelineOptions po;
  po.prefetch = 2;
  ASSIGN_OR_RETURN(auto pipe, data::Pipeline::Create(test_, so, spec_.data().transform(),
                                                     /*train=*/false, po));
  engine::LayerContext ctx;
  ctx.training = false;
  ctx.seed = spec_.training().seed();
  ctx.step = step_;
  double loss_sum = 0;
  int64_t correct = 0, n = 0;
  while (true) {
    ASSIGN_OR_RETURN(auto batch, pipe->Next());
    if (!batch.has_value()) break;
    if (batch->n == 0) continue;
    Replica& rep = *replicas_[0];
    ASSIGN_OR_RETURN(engine::Tensor logits, rep.model->Forward(BatchInput(*batch), ctx));
    ASSIGN_OR_RETURN(engine::LossResult r,
                     rep.loss->Compute(logits, BatchLabels(*batch), 0.0f, nullptr));
    loss_sum += r.loss_sum;
    correct += r.correct;
    n += batch->n;
    pipe->Recycle(std::move(*batch));
  }
  return std::make_pair(loss_sum / std::max<int64_t>(n, 1),
                        static_cast<double>(correct) / std::max<int64_t>(n, 1));
}

}  // namespace yoke::worker
