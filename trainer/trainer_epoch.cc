// Trainer::RunLoop's reporting and its ends: the log window's progress
// report, the end of an epoch (evaluation, checkpoints, the early-stopping
// decision every rank learns), leaving the group, and the run's final result.
#include <algorithm>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "spdlog/spdlog.h"
#include "telemetry/epoch_history.h"
#include "trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace yoke::worker {

void Trainer::ReportWindow(LoopState& s, float lr) {
  const v1::TrainingSpec& tr = spec_.training();
  trainer_internal::Window& w = s.window;
  v1::StepProgress p;
  p.set_step(s.step);
  p.set_total_steps(total_steps_);
  p.set_epoch(s.epoch);
  p.set_epochs(tr.epochs());
  p.set_step_in_epoch(s.step_in_epoch);
  p.set_steps_per_epoch(steps_per_epoch_);
  p.set_loss(w.loss / std::max<int64_t>(w.n, 1));
  p.set_accuracy(static_cast<double>(w.correct) / std::max<int64_t>(w.n, 1));
  double sps = w.global_n / std::max(w.seconds, 1e-9);
  p.set_samples_per_second(sps);
  p.set_eta_seconds((total_steps_ - s.step) * static_cast<double>(tr.batch_size()) /
                    std::max(sps, 1e-9));
  p.set_lr(lr);
  if (s.rep.comm) {
    p.set_collective_seq_issued(s.rep.comm->issued_seq());
    p.set_collective_seq_completed(s.rep.comm->completed_seq());
  }
  int64_t window_steps = 0;
  for (int64_t c : w.histogram) window_steps += c;
  p.set_window_steps(window_steps);
  p.set_step_seconds(w.seconds);
  p.set_data_wait_seconds(w.data_wait);
  p.set_allreduce_seconds(w.comm);
  p.set_allreduce_exposed_seconds(w.exposed);
  if (tr.clip_grad_norm() > 0) p.set_grad_norm(w.grad_norm / std::max<int64_t>(window_steps, 1));
  if (ps_job()) FillPsWindow(s, w.seconds, p.mutable_ps());
  *p.mutable_step_seconds_histogram() = w.histogram;
  if (s.progress) s.progress->OnStep(p);
  if (s.root) WriteStepEvents(p);
  w = trainer_internal::Window();
}

absl::Status Trainer::EndEpoch(LoopState& s, v1::TrainResult* result) {
  ++s.epoch;
  s.step_in_epoch = 0;
  if (s.lead) {
    epoch_ = s.epoch;
    step_in_epoch_ = 0;
  }
  const bool early_stopping = !spec_.training().early_stopping().monitor().empty();
  // A pipeline's evaluation runs through all of pipeline 0's stages.
  if (pipelined()) RETURN_IF_ERROR(PipelineEvaluate(s.rep));
  if (s.root) {
    ASSIGN_OR_RETURN(const v1::EpochResult e, SummarizeEpoch(s));
    common::MergeEpoch(e, common::kMaxHistoryEpochs, result->mutable_history());
    common::MergeEpoch(e, common::kMaxHistoryEpochs, &history_);
    CountForEarlyStopping(e);
    if (s.progress) s.progress->OnEpoch(e);
    WriteEpochEvents(s.step, e);
    if (!pipelined()) RETURN_IF_ERROR(CheckpointEpochEnd(s));
    if (early_stopping) RETURN_IF_ERROR(DecideEarlyStop(s, e));
  }
  // A pipeline's stages write its checkpoints together.
  if (pipelined()) RETURN_IF_ERROR(CheckpointEpochEnd(s));
  // Rank 0 alone evaluated: its decision reaches every rank before any
  // starts the next step, so all stop after this one.
  if (early_stopping) {
    RETURN_IF_ERROR(ShareEarlyStop(s));
    if (s.save_best) RETURN_IF_ERROR(SaveBestCheckpoint(s.rep));
    s.save_best = false;
  }
  s.epoch_sums = trainer_internal::Tally();
  return absl::OkStatus();
}

absl::Status Trainer::ShareEarlyStopThroughStore(LoopState& s) {
  // The key is the attempt's (a store is per attempt), and written once.
  constexpr absl::string_view kKey = "early-stopping/stopped-after-epoch";
  if (s.root) {
    return s.early_stop ? ps_store_->Set(kKey, absl::StrCat(s.epoch)) : absl::OkStatus();
  }
  absl::StatusOr<std::string> said = ps_store_->Get(kKey, absl::ZeroDuration());
  if (absl::IsDeadlineExceeded(said.status()) || absl::IsNotFound(said.status())) {
    return absl::OkStatus();  // the chief trains on
  }
  RETURN_IF_ERROR(said.status());
  int64_t chief_epochs = 0;
  if (!absl::SimpleAtoi(*said, &chief_epochs)) {
    return absl::InternalError(absl::StrCat("trainer: the store's ", kKey, " holds '", *said,
                                            "', not a number of epochs"));
  }
  if (s.epoch < chief_epochs) return absl::OkStatus();  // a slower replica trains as many
  s.early_stop = true;
  if (s.progress) {
    s.progress->OnInfo(absl::StrFormat(
        "replica %d stops after epoch %d: the chief's early stopping ended the run after its "
        "epoch %s",
        s.rep.rank, s.epoch, *said));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::EpochResult> Trainer::SummarizeEpoch(const LoopState& s) {
  const trainer_internal::Tally& t = s.epoch_sums;
  v1::EpochResult e;
  e.set_epoch(s.epoch);
  e.set_train_loss(t.loss / std::max<int64_t>(t.n, 1));
  e.set_train_accuracy(static_cast<double>(t.correct) / std::max<int64_t>(t.n, 1));
  e.set_seconds(t.seconds);
  e.set_samples_per_second(t.global_n / std::max(t.seconds, 1e-9));
  ASSIGN_OR_RETURN(auto eval, Evaluate());
  e.set_test_loss(eval.first);
  e.set_test_accuracy(eval.second);
  if (validation_) {
    ASSIGN_OR_RETURN(auto val, EvaluateValidation());
    e.set_validation_loss(val.first);
    e.set_validation_accuracy(val.second);
  }
  return e;
}

absl::Status Trainer::DecideEarlyStop(LoopState& s, const v1::EpochResult& e) {
  const EarlyStop es = EarlyStopping();
  s.early_stop = es.stop;
  if (spec_.checkpoint().keep_best() && es.best_epoch == e.epoch()) {
    if (pipelined()) {
      s.save_best = true;
    } else {
      RETURN_IF_ERROR(SaveBestCheckpoint(s.rep));
    }
  }
  return absl::OkStatus();
}

absl::Status Trainer::ShareEarlyStop(LoopState& s) {
  if (!s.rep.comm && ps_job() && PsRestartable()) return ShareEarlyStopThroughStore(s);
  if (!s.rep.comm) return absl::OkStatus();
  int64_t flags[2] = {s.early_stop ? 1 : 0, s.save_best ? 1 : 0};
  collective::Buffer b;
  b.data = flags;
  b.count = 2;
  b.dtype = collective::DataType::kI64;
  collective::Options o;
  o.timeout = collective_timeout_;
  o.tag = "early stopping";
  RETURN_IF_ERROR(s.rep.comm->Broadcast(b, /*root=*/0, o)->Wait());
  s.early_stop = flags[0] != 0;
  s.save_best = flags[1] != 0;
  return absl::OkStatus();
}

void Trainer::LeaveGroup(Replica& r) {
  // Every rank leaves the group before it closes its connections: a rank
  // that exits right after the last allreduce could otherwise fail a peer
  // still finishing it ("Connection closed by peer", seen between Docker
  // containers). Not a collective, so a rank that stopped early mismatches
  // no op; it waits here until its peers fail or leave. Training is done, so
  // a failure here (a peer's own, which that peer reports) is only logged.
  for (collective::Communicator* c : {r.stage_comm.get(), r.comm.get()}) {
    if (c != nullptr && c->size() > 1) {
      if (absl::Status st = c->Leave(collective_timeout_); !st.ok()) {
        spdlog::warn("rank {}: leaving the communicator: {}", r.rank, st.ToString());
      }
    }
  }
}

absl::Status Trainer::FinishRun(LoopState& s, v1::TrainResult* result) {
  // Stopped mid-epoch (max_steps or a stop request): evaluate what we have
  // and checkpoint the exact position so `--resume` continues from it.
  if (s.step_in_epoch != 0 || result->history_size() == 0) {
    ASSIGN_OR_RETURN(auto eval, Evaluate());
    result->set_test_loss(eval.first);
    result->set_test_accuracy(eval.second);
    // The training loss of the partial epoch (it was 0 when a run stopped
    // before its first epoch ended).
    if (s.epoch_sums.n > 0) result->set_train_loss(s.epoch_sums.loss / s.epoch_sums.n);
    // A pipeline's stages wrote theirs together, before leaving the group;
    // a PS job's chief before leaving the PS tasks.
    return pipelined() || ps_job() ? absl::OkStatus() : SaveStopCheckpoint(s);
  }
  const v1::EpochResult& last = result->history(result->history_size() - 1);
  result->set_test_loss(last.test_loss());
  result->set_test_accuracy(last.test_accuracy());
  result->set_train_loss(last.train_loss());
  return absl::OkStatus();
}

}  // namespace yoke::worker
