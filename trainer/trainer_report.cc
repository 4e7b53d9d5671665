// Trainer reporting: what Run() tells the ProgressSink before the first
// step and after the last, and the process's peak memory.
#include <sys/resource.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace yoke::worker {

int64_t PeakRssBytes() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

int64_t Trainer::model_parameters() const {
  return pipelined() ? model_parameters_ : replicas_[0]->model->params().num_parameters();
}

void Trainer::ReportStart() const {
  const engine::Model& model0 = *replicas_[0]->model;
  if (options_.progress) {
    options_.progress->OnInfo(absl::StrFormat(
        "model: %d parameters, %.1f MFLOP per example (forward+backward); "
        "train %d examples, %s%d steps per epoch, %d threads",
        model_parameters(),
        6.0 * (pipelined() ? model_macs_ : model0.ForwardMacsPerExample()) / 1e6, train_->size(),
        test_ ? absl::StrCat("test ", test_->size(), " examples, ") : std::string(),
        steps_per_epoch_, threads_ * options_.num_replicas));
    if (distributed()) {
      options_.progress->OnInfo(absl::StrFormat(
          "data parallel: ranks %d..%d of %d in this process (%d threads each); global "
          "batch %d, about %d per replica",
          options_.first_rank, options_.first_rank + options_.num_replicas - 1, options_.world_size,
          threads_, spec_.training().batch_size(),
          spec_.training().batch_size() / (options_.world_size - ps_tasks_)));
    }
    if (ps_job()) ReportPs(/*end=*/false);
    for (size_t i = 0; pipelined() && i < replicas_.size(); ++i) {
      const Replica* r = replicas_[i].get();
      const int end = r->stage + 1 < stages_ ? stage_starts_[r->stage + 1] : model_layers_;
      options_.progress->OnInfo(absl::StrFormat(
          "pipeline: rank %d runs stage %d of %d (layers %d..%d of %d, %d parameters) of "
          "pipeline %d of %d",
          r->rank, r->stage + 1, stages_, stage_starts_[r->stage] + 1, end, model_layers_,
          r->model->params().num_parameters(), r->pipeline + 1, data_parallel_ranks()));
    }
  }
}

void Trainer::ReportEnd(const v1::TrainResult& result) const {
  const bool root = options_.first_rank == 0;
  if (stop_.load() && options_.progress) {
    options_.progress->OnInfo(absl::StrCat("stopped at step ", step_, " on request"));
  }
  for (size_t i = 0; pipelined() && options_.progress && i < replicas_.size(); ++i) {
    const Replica* r = replicas_[i].get();
    if (r->peak_in_flight == 0) continue;
    options_.progress->OnInfo(absl::StrFormat(
        "pipeline: rank %d (stage %d of %d) held at most %d micro-batches in flight, %.2f MiB "
        "of activations",
        r->rank, r->stage + 1, stages_, r->peak_in_flight, r->peak_activation_bytes / 1048576.0));
  }
  if (ps_job()) ReportPs(/*end=*/true);
  if (options_.progress) {
    if (root) {
      options_.progress->OnFinish(result);
    } else {
      options_.progress->OnInfo(absl::StrFormat(
          "ranks %d..%d done after %d steps (rank 0 reports the result)", options_.first_rank,
          options_.first_rank + options_.num_replicas - 1, step_));
    }
  }
}

}  // namespace yoke::worker
