// Trainer checkpoints: save, restore at Create, the epoch/step cadence, the
// best epoch's, and the position where a run stopped mid-epoch.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/checkpoint.h"
#include "engine/device_backend.h"
#include "trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace yoke::worker {

v1::CheckpointHeader Trainer::CheckpointHeaderNow() const {
  v1::CheckpointHeader h;
  h.set_step(step_);
  h.set_epoch(epoch_);
  h.set_step_in_epoch(step_in_epoch_);
  h.set_seed(spec_.training().seed());
  *h.mutable_spec() = spec_;
  h.set_optimizer_step(replicas_[0]->optimizer->step_count());
  h.set_world_size(options_.world_size);
  h.set_wall_seconds(train_seconds_);
  h.set_samples_seen(samples_seen_);
  *h.mutable_history() = history_;
  if (!spec_.training().early_stopping().monitor().empty()) {
    *h.mutable_early_stopping() = early_stopping_;
  }
  for (const std::string& name : train_->class_names()) h.add_class_names(name);
  for (int64_t d : model_input_) h.add_input_shape(d);
  h.set_num_classes(model_classes_);
  return h;
}

absl::Status Trainer::SaveCheckpoint(const std::string& path) {
  if (pipelined()) {
    return absl::FailedPreconditionError(
        "a pipeline job's checkpoint is written by all its stages together (checkpoint.dir)");
  }
  const Replica& r = *replicas_[0];
  engine::NamedTensors tensors = {{"params", r.model->params().flat_values()},
                                  {"state", r.model->params().flat_state()}};
  for (auto& [name, t] : r.optimizer->State()) tensors.emplace_back("optim/" + name, t);
  // Files hold host copies: a checkpoint written on a GPU resumes on a CPU.
  for (auto& [name, t] : tensors) {
    if (!t.defined() || t.device().is_cpu()) continue;
    engine::Tensor host = engine::Tensor::Empty(t.shape(), t.dtype());
    RETURN_IF_ERROR(engine::CopyTensor(host, t));
    t = host;
  }
  return engine::WriteCheckpoint(path, CheckpointHeaderNow(), tensors);
}

absl::Status Trainer::WriteCheckpointOf(Replica& r, const std::string& path) {
  if (pipelined()) return GatherCheckpoint(r, path);
  return ps_job() ? SavePsCheckpoint(r, path) : SaveCheckpoint(path);
}

absl::Status Trainer::Restore(const std::string& path) {
  // A pipeline stage reads only the header here (verifying the whole file
  // as it streams past) and its own part of the tensors in ConnectPipeline.
  engine::Checkpoint ck;
  if (pipelined()) {
    ASSIGN_OR_RETURN(ck.header, engine::ReadCheckpointSlices(path, {}));
    pipeline_resume_ = path;
  } else {
    ASSIGN_OR_RETURN(ck, engine::ReadCheckpoint(path));
  }
  // Labels are indices into the class list: another list would relabel them.
  const std::vector<std::string> classes = train_->class_names();
  if (ck.header.class_names_size() > 0 && !classes.empty() &&
      !std::equal(classes.begin(), classes.end(), ck.header.class_names().begin(),
                  ck.header.class_names().end())) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, " was trained on classes [",
                                                   absl::StrJoin(ck.header.class_names(), ", "),
                                                   "] but data.train has [",
                                                   absl::StrJoin(classes, ", "), "]"));
  }
  auto restore = [&](const std::string& name, const engine::Tensor& dst) -> absl::Status {
    const engine::Tensor* src = ck.Find(name);
    if (src == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", path, " has no '", name, "' tensor"));
    }
    if (src->numel() != dst.numel() || src->dtype() != dst.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": '", name, "' holds ",
                                                     src->numel(), " values but this model needs ",
                                                     dst.numel(),
                                                     " (was it written for a different model?)"));
    }
    return engine::CopyTensor(dst, *src);
  };
  // Every local replica restores the same checkpoint (and Connect() then
  // broadcasts rank 0's copy anyway).
  for (auto& r : replicas_) {
    if (pipelined()) break;
    if (r->ps_task) {
      RETURN_IF_ERROR(RestorePsShard(*r, ck, path));
      continue;
    }
    RETURN_IF_ERROR(restore("params", r->model->params().flat_values()));
    RETURN_IF_ERROR(restore("state", r->model->params().flat_state()));
    for (auto& [name, t] : r->optimizer->State()) {
      RETURN_IF_ERROR(restore("optim/" + name, t));
    }
    r->optimizer->set_step_count(ck.header.optimizer_step());
  }
  step_ = ck.header.step();
  epoch_ = ck.header.epoch();
  step_in_epoch_ = ck.header.step_in_epoch();
  train_seconds_ = ck.header.wall_seconds();
  samples_seen_ = ck.header.samples_seen();
  if (step_in_epoch_ >= steps_per_epoch_) {
    epoch_ += step_in_epoch_ / steps_per_epoch_;
    step_in_epoch_ %= steps_per_epoch_;
  }
  history_ = ck.header.history();
  early_stopping_ = ck.header.early_stopping();
  if (!ck.header.has_early_stopping()) {
    // Written before the header carried the count: its history is whole.
    early_stopping_.Clear();
    for (const v1::EpochResult& e : history_) CountForEarlyStopping(e);
  }
  resumed_from_ = path;
  if (options_.progress) {
    options_.progress->OnInfo(absl::StrFormat(
        "resumed from %s (written by %d replicas): step %d, epoch %d, batch %d of %d", path,
        std::max<int64_t>(ck.header.world_size(), 1), step_, epoch_ + 1, step_in_epoch_,
        steps_per_epoch_));
    // The epochs before the checkpoint, reported again: one whose report
    // died with a crashed worker reaches the job's history now, and the
    // coordinator keeps each epoch once.
    if (options_.first_rank == 0) {
      for (const v1::EpochResult& e : history_) options_.progress->OnEpoch(e);
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::MaybeCheckpoint(LoopState& s, bool end_of_epoch) {
  const v1::CheckpointSpec& c = spec_.checkpoint();
  if (c.dir().empty() || !(s.root || pipelined())) return absl::OkStatus();
  const bool due = end_of_epoch || (c.every_steps() > 0 && s.step % c.every_steps() == 0);
  if (!due) return absl::OkStatus();
  const std::string path = engine::CheckpointPath(c.dir(), s.step);
  RETURN_IF_ERROR(WriteCheckpointOf(s.rep, path));
  if (!s.root) return absl::OkStatus();
  last_checkpoint_ = path;
  return engine::PruneCheckpoints(c.dir(), c.keep() > 0 ? c.keep() : 3);
}

absl::Status Trainer::CheckpointEpochEnd(LoopState& s) {
  const int64_t every = spec_.checkpoint().every_steps();
  if (every > 0 && s.step % every == 0) return absl::OkStatus();  // MaybeCheckpoint(false) wrote it
  return MaybeCheckpoint(s, true);
}

absl::Status Trainer::SaveBestCheckpoint(Replica& r) {
  // Atomic (WriteCheckpoint renames a finished file into place), and not
  // named ckpt-*.yoke, so `keep` never prunes it and a restart never resumes
  // from it.
  const std::string best = spec_.checkpoint().dir() + "/best.ckpt";
  RETURN_IF_ERROR(WriteCheckpointOf(r, best));
  if (r.rank == 0) best_checkpoint_ = best;
  return absl::OkStatus();
}

absl::Status Trainer::SaveStopCheckpoint(LoopState& s) {
  if (spec_.checkpoint().dir().empty()) return absl::OkStatus();
  const std::string path = engine::CheckpointPath(spec_.checkpoint().dir(), s.step);
  RETURN_IF_ERROR(WriteCheckpointOf(s.rep, path));
  if (s.root) last_checkpoint_ = path;
  return absl::OkStatus();
}

}  // namespace yoke::worker
