// The Coordinator (coordinator/coordinator.h), part 4 of 5: applying what a
// worker observed of one attempt (ApplyStatus and its steps), and the pure
// steps of coordinator/coordinator_internal.h.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/hang_report.h"
#include "jobspec/ps_check.h"
#include "spdlog/spdlog.h"

namespace yoke::server {
namespace coordinator_internal {

std::vector<v1::LogLine> LogLinesToStore(const v1::AttemptStatus& st, int attempt, int rank,
                                         const std::string& worker_id, int64_t now_ms) {
  std::vector<v1::LogLine> lines;
  const int n = std::min(st.logs_size(), kMaxLogLines);
  for (int i = 0; i < n; ++i) {
    v1::LogLine& l = lines.emplace_back(st.logs(i));
    l.set_attempt(attempt);
    l.set_rank(rank);
    l.set_worker_id(worker_id);
    if (l.time_ms() == 0) l.set_time_ms(now_ms);
    if (l.text().size() > kMaxLogText) l.mutable_text()->resize(kMaxLogText);
  }
  if (st.logs_size() > n) {
    v1::LogLine& l = lines.emplace_back(lines.back());
    l.set_text(absl::StrCat("[yoke: ", st.logs_size() - n, " more lines dropped]"));
  }
  return lines;
}

void AddCurvePoint(const v1::StepProgress& p, size_t max_points, JobCurve* curve) {
  std::vector<CurvePoint>& points = curve->points;
  if (!points.empty() && points.back().step == p.step()) return;
  if (curve->newest_off_stride) points.pop_back();
  const int64_t report = curve->reports++;
  bool on = report % curve->stride == 0;
  // The points on the stride are reports 0, s, 2s, ...: every other one of
  // them is on the doubled stride. One place is left for the newest.
  if (on && points.size() + 1 >= std::max<size_t>(max_points, 2)) {
    size_t k = 0;
    for (size_t i = 0; i < points.size(); i += 2) points[k++] = points[i];
    points.resize(k);
    curve->stride *= 2;
    on = report % curve->stride == 0;
  }
  points.push_back({p.step(), p.loss(), p.accuracy()});
  curve->newest_off_stride = !on;
}

std::string ExitReason(const v1::Attempt& a, const v1::Assignment& share,
                       const v1::AttemptStatus& st, int pipeline_stages) {
  std::string stages;
  if (pipeline_stages > 1) {
    std::set<int> s;
    for (int r = share.first_rank(); r < share.first_rank() + std::max(share.num_replicas(), 1);
         ++r) {
      s.insert(r % pipeline_stages + 1);
    }
    stages = absl::StrCat(s.size() == 1 ? " (stage " : " (stages ", absl::StrJoin(s, ","), " of ",
                          pipeline_stages, ")");
  }
  const std::string who = a.world_size() > 1 ? absl::StrCat("trainer of ", RanksOf(share), stages,
                                                            " on ", share.worker_id())
                                             : absl::StrCat("trainer on ", share.worker_id());
  std::string what = st.exit_code() > 128
                         ? absl::StrCat(who, " killed by signal ", st.exit_code() - 128)
                         : absl::StrCat(who, " exited with code ", st.exit_code());
  // The worker's own description of a signal ("killed by signal 9 (Killed);
  // last output: ...") is not repeated.
  absl::string_view reason = st.reason();
  const std::string said = absl::StrCat("killed by signal ", st.exit_code() - 128);
  if (st.exit_code() > 128 && absl::StartsWith(reason, said)) {
    reason.remove_prefix(said.size());
    absl::StrAppend(&what, reason);
  } else if (!reason.empty()) {
    absl::StrAppend(&what, ": ", reason);
  }
  return what;
}

bool PeerCaused(absl::string_view reason) {
  // Gloo's pairs, the hang listener, and the shared-memory group (a local
  // peer that died, or that broke the group when its own op failed).
  for (absl::string_view echo :
       {"closed by peer", "reset by peer", "broken by a peer's failure",
        "died while this rank waited for it", "broke the shared-memory group"}) {
    if (absl::StrContains(reason, echo)) return true;
  }
  return false;
}

}  // namespace coordinator_internal

using coordinator_internal::ShareOf;

void Coordinator::ApplyStatus(const std::string& worker_id, const v1::AttemptStatus& st) {
  auto it = active_.find(st.job_id());
  if (it == active_.end()) return;  // finished or unknown: the worker stops it
  ActiveJob& aj = it->second;
  v1::Attempt* a = CurrentAttempt(aj);
  if (a == nullptr || a->number() != st.attempt()) return;  // a stale attempt
  const v1::Assignment* share = ShareOf(*a, worker_id);
  if (share == nullptr || aj.exited.count(worker_id)) return;
  // A share restarted alone: what its earlier incarnation's trainer said
  // last (the worker reports it until it starts the next) is over.
  if (st.incarnation() < share->incarnation()) return;

  if (st.logs_size() > 0) StoreLogs(aj, *a, *share, worker_id, st);
  // The job's metrics are global rank 0's (every rank trains the same
  // model; rank 0 evaluates and checkpoints). Other ranks' collective
  // sequence numbers are kept for hang reports.
  const bool rank0 = share->first_rank() == 0;
  if (st.has_progress() &&
      (st.progress().collective_seq_issued() > 0 || st.progress().collective_seq_completed() > 0)) {
    aj.collective_done[share->first_rank()] = st.progress().collective_seq_completed();
  }
  StatusEffect effect;
  if (rank0 && st.epochs_size() > 0) RecordEpochs(aj, st, &effect);
  if (rank0 && st.has_progress()) RecordProgress(aj, st, &effect);
  if (st.phase() == v1::AttemptStatus::RUNNING) MarkShareRunning(aj, *a, worker_id, &effect);
  if (st.phase() == v1::AttemptStatus::EXITED) {
    if (ApplyExit(aj, *a, *share, worker_id, st)) return;  // `aj` may be gone
    // The share's exit (and rank 0's result) is written before the worker
    // hears it was taken, since the worker then forgets it.
    effect.state_changed = true;
  }
  if (effect.state_changed) Persist(aj).IgnoreError();
  if (!effect.message.empty()) Bump(aj, std::move(effect.message));
}

void Coordinator::StoreLogs(ActiveJob& aj, const v1::Attempt& a, const v1::Assignment& share,
                            const std::string& worker_id, const v1::AttemptStatus& st) {
  std::vector<v1::LogLine> lines = coordinator_internal::LogLinesToStore(
      st, a.number(), share.first_rank(), worker_id, clock_->NowMs());
  absl::Status s = store_->AppendLogs(aj.job.id(), &lines);
  if (s.ok()) {
    aj.last_log_seq = lines.back().seq();
    changed_.SignalAll();
  } else {
    spdlog::error("storing logs of {}: {}", aj.job.id(), s.ToString());
  }
}

void Coordinator::RecordEpochs(ActiveJob& aj, const v1::AttemptStatus& st, StatusEffect* effect) {
  // Every epoch once: an attempt that resumed from a checkpoint taken
  // mid-epoch trains that epoch again and reports it again; its result
  // replaces the one of the failed attempt.
  common::MergeEpochs(st.epochs(), kMaxHistoryEpochs, aj.job.mutable_history());
  const v1::EpochResult& last = st.epochs(st.epochs_size() - 1);
  effect->message = absl::StrCat("epoch ", last.epoch(), " done: train_loss ", last.train_loss(),
                                 ", test_accuracy ", last.test_accuracy());
  effect->state_changed = true;  // the metric history is written at once, like states
}

void Coordinator::RecordProgress(ActiveJob& aj, const v1::AttemptStatus& st, StatusEffect* effect) {
  *aj.job.mutable_progress() = st.progress();
  aj.dirty = true;
  coordinator_internal::AddCurvePoint(st.progress(), kMaxCurvePoints, &aj.curve);
  if (aj.failed_at_ms > 0 && st.progress().window_steps() > 0) {
    if (options_.metrics) options_.metrics->OnRecovered((clock_->NowMs() - aj.failed_at_ms) / 1e3);
    aj.failed_at_ms = 0;
  }
  if (effect->message.empty()) effect->message = "progress";
}

void Coordinator::MarkShareRunning(ActiveJob& aj, v1::Attempt& a, const std::string& worker_id,
                                   StatusEffect* effect) {
  aj.reported.insert(worker_id);
  if (aj.job.state() != v1::JOB_SCHEDULED ||
      static_cast<int>(aj.reported.size()) != a.assignments_size()) {
    return;
  }
  a.set_state(v1::ATTEMPT_RUNNING);
  aj.job.set_state(v1::JOB_RUNNING);
  if (options_.metrics && a.number() == 1) {
    options_.metrics->OnScheduled((clock_->NowMs() - aj.job.create_time_ms()) / 1e3);
  }
  effect->message = absl::StrCat("attempt ", a.number(), " running");
  effect->state_changed = true;
}

void Coordinator::FailEchoedAttempts() {
  const int64_t now = clock_->NowMs();
  std::vector<std::string> due;  // FailAttempt may end a job and edit active_
  for (const auto& [id, aj] : active_) {
    if (aj.echo && now >= aj.echo->deadline_ms) due.push_back(id);
  }
  for (const std::string& id : due) {
    auto it = active_.find(id);
    if (it == active_.end() || !it->second.echo) continue;
    const ActiveJob::Echo echo = *it->second.echo;
    FailAttempt(it->second, echo.reason, echo.retryable);
  }
}

std::string Coordinator::FailureReason(const ActiveJob& aj, const v1::Attempt& a,
                                       const v1::Assignment& share, const v1::AttemptStatus& st) {
  std::map<std::string, std::string> addresses;  // to name the blamed workers' addresses
  for (const v1::Assignment& as : a.assignments()) {
    if (const WorkerEntry* w = registry_.Find(as.worker_id())) addresses[w->id] = w->address;
  }
  const int stages = aj.job.spec().distribution().pipeline().stages();
  return AttributeHang(coordinator_internal::ExitReason(a, share, st, stages), a,
                       aj.collective_done, addresses);
}

bool Coordinator::RestartShareAlone(ActiveJob& aj, v1::Attempt& a, const v1::Assignment& share,
                                    const std::string& worker_id, const v1::AttemptStatus& st) {
  if (!aj.restarts_alone || aj.echo || share.first_rank() == 0 || st.exit_code() == 2 ||
      coordinator_internal::OutOfMemory(st.reason())) {
    return false;
  }
  // A share holding a PS task takes the job's state with it: the attempt
  // restarts from its checkpoint instead.
  const int ps_tasks = common::ParameterServerTasks(aj.job.spec());
  const int workers = std::max(a.assignments_size(), 1);
  const int per_worker = (a.world_size() - ps_tasks) / workers;
  for (int r = share.first_rank(); r < share.first_rank() + std::max(share.num_replicas(), 1);
       ++r) {
    if (per_worker < 1 || common::RoleOfRank(r, workers, per_worker, ps_tasks).ps) return false;
  }
  const int max_restarts = coordinator_internal::MaxRestarts(aj.job);
  const int used = coordinator_internal::RestartsUsed(aj.job);
  if (used >= max_restarts) return false;
  int incarnation = 0;
  for (v1::Assignment& as : *a.mutable_assignments()) {
    if (as.worker_id() == worker_id) {
      as.set_incarnation(as.incarnation() + 1);
      as.clear_exited();
      as.clear_exit_code();
      incarnation = as.incarnation();
    }
  }
  aj.exited.erase(worker_id);
  aj.collective_done.erase(share.first_rank());
  if (options_.metrics) options_.metrics->OnRestart();
  aj.job.set_reason(absl::StrCat(FailureReason(aj, a, share, st), "; restarted alone as its ",
                                 "incarnation ", incarnation, " while the others train on (",
                                 used + 1, " of ", max_restarts, " restarts)"));
  spdlog::warn("{}: attempt {}: {}", aj.job.id(), a.number(), aj.job.reason());
  Persist(aj).IgnoreError();
  Bump(aj, aj.job.reason());
  return true;
}

bool Coordinator::ApplyExit(ActiveJob& aj, v1::Attempt& a, const v1::Assignment& share,
                            const std::string& worker_id, const v1::AttemptStatus& st) {
  aj.exited[worker_id] = st.exit_code();
  for (v1::Assignment& as : *a.mutable_assignments()) {
    if (as.worker_id() != worker_id) continue;
    as.set_exited(true);
    as.set_exit_code(st.exit_code());
  }
  const bool everyone_exited = static_cast<int>(aj.exited.size()) == a.assignments_size();
  if (st.exit_code() != 0 && coordinator_internal::PeerCaused(st.reason())) {
    // Likely the echo of a peer that died (killed out of memory, say), whose
    // own exit would say why: wait a little for it. Tick() fails the attempt
    // with the first echo when it does not come in time.
    if (!aj.echo) {
      aj.echo = ActiveJob::Echo{FailureReason(aj, a, share, st), st.exit_code() != 2,
                                clock_->NowMs() + options_.peer_exit_grace_ms};
    }
    if (!everyone_exited) return false;
    const ActiveJob::Echo echo = *aj.echo;
    FailAttempt(aj, echo.reason, echo.retryable);
    return true;
  }
  if (st.exit_code() != 0 && RestartShareAlone(aj, a, share, worker_id, st)) {
    return false;
  }
  if (st.exit_code() != 0) {
    // Exit code 2 is a bad spec or input, and running out of memory (the
    // trainer's own check, or its worker's memory cgroup) happens again with
    // the same spec in the same share: a retry would fail the same way.
    const bool oom = coordinator_internal::OutOfMemory(st.reason());
    std::string reason = FailureReason(aj, a, share, st);
    if (oom && st.exit_code() != 2) {
      absl::StrAppend(&reason,
                      "; not retried: the same spec would run out of memory again (lower "
                      "training.batch_size or the model's size, or give the workers more memory)");
    }
    FailAttempt(aj, reason, /*retryable=*/st.exit_code() != 2 && !oom);
    return true;
  }
  if (share.first_rank() == 0) {
    *aj.job.mutable_result() = st.result();
    // The trainer's result holds every epoch; the job keeps as many as its
    // history does.
    if (aj.job.result().history_size() > kMaxHistoryEpochs) {
      google::protobuf::RepeatedPtrField<v1::EpochResult> bounded;
      common::MergeEpochs(aj.job.result().history(), kMaxHistoryEpochs, &bounded);
      aj.job.mutable_result()->mutable_history()->Swap(&bounded);
    }
  }
  if (!everyone_exited) return false;
  if (aj.echo) {  // every share is out, and some failed only for a peer's failure
    const ActiveJob::Echo echo = *aj.echo;
    FailAttempt(aj, echo.reason, echo.retryable);
    return true;
  }
  a.set_state(v1::ATTEMPT_SUCCEEDED);
  a.set_end_time_ms(clock_->NowMs());
  Unindex(aj);
  Finish(aj, v1::JOB_SUCCEEDED, "");
  return true;
}

}  // namespace yoke::server
