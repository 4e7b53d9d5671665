// The Coordinator (coordinator/coordinator.h), part 5 of 5: the attempt
// lifecycle: placing pending jobs (RunScheduler), ending an attempt, the
// restart policy (FailAttempt) and finishing a job.
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/quote.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/coordinator_metrics.h"
#include "spdlog/spdlog.h"

namespace yoke::server {

using coordinator_internal::AttemptKey;

void Coordinator::RunScheduler() {
  schedule_needed_ = false;
  if (pending_.empty()) return;
  std::vector<PendingJob> jobs;
  for (const std::string& id : pending_) {
    const v1::Job& job = active_.at(id).job;
    jobs.push_back({id, ShapeOf(job.spec()), job.priority(), job.create_time_ms(), job.owner()});
  }
  SchedulePolicy policy;
  policy.max_running_devices_per_submitter = options_.max_running_devices_per_submitter;
  const int64_t now_ms = clock_->NowMs();
  for (auto& [id, aj] : active_) {
    const v1::Attempt* a = CurrentAttempt(aj);  // none while PENDING
    if (a == nullptr) continue;
    policy.running_devices[aj.job.owner()] += AttemptDevices(*a);
    policy.usage[aj.job.owner()] +=
        AttemptDevices(*a) * std::max<int64_t>(0, now_ms - a->start_time_ms()) / 1e3;
  }
  // A stopped attempt's trainer holds its devices until it exits: they stay
  // its submitter's, or a job stopped at max_run_seconds would let the next
  // one take a device more than the cap while the first is still stopping.
  for (const auto& [worker, attempts] : draining_) {
    for (const auto& [key, d] : attempts) {
      policy.running_devices[d.owner] += static_cast<int64_t>(d.devices.size());
    }
  }
  for (auto& [owner, device_seconds] : policy.usage) device_seconds += AddUsage(owner, 0);
  for (const PendingJob& j : jobs) {
    if (!policy.usage.count(j.owner)) policy.usage[j.owner] = AddUsage(j.owner, 0);
  }
  ScheduleResult r = Schedule(std::move(jobs), Capacities(/*alive_only=*/true), policy);
  for (Placement& p : r.placed) {
    ActiveJob& aj = active_.at(p.job_id);
    v1::Attempt* a = aj.job.add_attempts();
    a->set_number(aj.job.attempts_size());
    a->set_state(v1::ATTEMPT_SCHEDULED);
    a->set_world_size(p.world_size);
    a->set_start_time_ms(now_ms);
    std::vector<std::string> names;
    for (v1::Assignment& s : p.assignments) {
      names.push_back(s.worker_id());
      by_worker_[s.worker_id()].insert(p.job_id);
      *a->add_assignments() = std::move(s);
    }
    aj.job.set_state(v1::JOB_SCHEDULED);
    aj.job.set_reason("");
    if (aj.job.start_time_ms() == 0) aj.job.set_start_time_ms(now_ms);
    aj.reported.clear();
    aj.exited.clear();
    aj.collective_done.clear();
    pending_.erase(p.job_id);
    rendezvous_.Open(p.job_id, a->number());
    Persist(aj).IgnoreError();
    std::string msg =
        absl::StrCat("attempt ", a->number(), " scheduled on ", absl::StrJoin(names, ", "));
    // The trainer picks the checkpoint, where the files are.
    if (a->number() > 1 && !aj.job.spec().checkpoint().dir().empty()) {
      absl::StrAppend(&msg, ", resuming from the newest checkpoint in ",
                      common::Quote(aj.job.spec().checkpoint().dir()));
    }
    spdlog::info("{}: {}", p.job_id, msg);
    Bump(aj, std::move(msg));
  }
  for (auto& [id, reason] : r.pending) {
    ActiveJob& aj = active_.at(id);
    if (aj.job.reason() == reason) continue;
    // Not a state change: it reaches the store with the next flush.
    aj.job.set_reason(reason);
    aj.dirty = true;
    Bump(aj, reason);
  }
}

double Coordinator::AddUsage(const std::string& owner, double device_seconds) {
  constexpr double kHalfLifeSeconds = 3600;
  const absl::Time now = clock_->Now();
  Usage& u = usage_[owner];
  if (u.as_of != absl::Time()) {
    u.device_seconds *= std::exp2(-absl::ToDoubleSeconds(now - u.as_of) / kHalfLifeSeconds);
  }
  u.as_of = now;
  u.device_seconds += device_seconds;
  return u.device_seconds;
}

void Coordinator::Unindex(ActiveJob& aj) {
  v1::Attempt* a = CurrentAttempt(aj);
  if (a == nullptr) return;
  AddUsage(aj.job.owner(),
           AttemptDevices(*a) * std::max<int64_t>(0, clock_->NowMs() - a->start_time_ms()) / 1e3);
  for (const v1::Assignment& s : a->assignments()) {
    auto it = by_worker_.find(s.worker_id());
    if (it == by_worker_.end()) continue;
    it->second.erase(aj.job.id());
    if (it->second.empty()) by_worker_.erase(it);
  }
  rendezvous_.Close(aj.job.id(), a->number());
  schedule_needed_ = true;
}

void Coordinator::EndAttempt(ActiveJob& aj, v1::AttemptState state, const std::string& reason) {
  v1::Attempt* a = CurrentAttempt(aj);
  if (a == nullptr) return;
  a->set_state(state);
  a->set_reason(reason);
  a->set_end_time_ms(clock_->NowMs());
  const std::string kind = ShapeOf(aj.job.spec()).kind;
  for (const v1::Assignment& s : a->assignments()) {
    // Its trainer may still be running: hold the devices until the worker
    // stops reporting it (lost workers hold nothing).
    if (aj.exited.count(s.worker_id()) || !registry_.IsAlive(s.worker_id())) continue;
    draining_[s.worker_id()][AttemptKey(aj.job.id(), a->number())] =
        Draining{kind, std::vector<int>(s.devices().begin(), s.devices().end()), aj.job.owner()};
  }
  Unindex(aj);
}

void Coordinator::FailAttempt(ActiveJob& aj, const std::string& reason, bool retryable) {
  v1::Attempt* a = CurrentAttempt(aj);
  if (a == nullptr) return;
  const int number = a->number();
  EndAttempt(aj, v1::ATTEMPT_FAILED, reason);
  const int max_restarts = coordinator_internal::MaxRestarts(aj.job);
  const int restarts_used = coordinator_internal::RestartsUsed(aj.job);
  spdlog::warn("{}: attempt {} failed: {}", aj.job.id(), number, reason);
  if (!retryable || restarts_used >= max_restarts) {
    std::string why = reason;
    if (retryable && max_restarts > 0) {
      absl::StrAppend(&why, " (after ", restarts_used, " restarts of ", max_restarts, ")");
    }
    Finish(aj, v1::JOB_FAILED, why);
    return;
  }
  aj.failed_at_ms = clock_->NowMs();
  if (options_.metrics) options_.metrics->OnRestart();
  aj.job.set_state(v1::JOB_PENDING);
  aj.job.set_reason(absl::StrCat("attempt ", number, " failed: ", reason, "; restarting (",
                                 restarts_used + 1, " of ", max_restarts, ")"));
  aj.reported.clear();
  aj.exited.clear();
  aj.echo.reset();
  aj.collective_done.clear();
  pending_.insert(aj.job.id());
  schedule_needed_ = true;
  Persist(aj).IgnoreError();
  Bump(aj, aj.job.reason());
}

void Coordinator::StopOverdueJobs() {
  const int64_t now_ms = clock_->NowMs();
  std::vector<std::pair<std::string, std::string>> overdue;  // (id, reason)
  for (auto& [id, aj] : active_) {
    const bool own = aj.job.spec().max_run_seconds() > 0;
    const int64_t limit_s =
        own ? aj.job.spec().max_run_seconds() : options_.default_max_run_seconds;
    const int64_t ran_ms = now_ms - aj.job.start_time_ms();
    if (limit_s <= 0 || aj.job.start_time_ms() == 0 || ran_ms < limit_s * 1000) continue;
    overdue.emplace_back(
        id, absl::StrCat("ran for ", absl::FormatDuration(absl::Milliseconds(ran_ms)),
                         " since it first started, past ",
                         own ? "its max_run_seconds" : "the coordinator's default_max_run_seconds",
                         " (", limit_s, ")"));
  }
  for (const auto& [id, reason] : overdue) {
    ActiveJob& aj = active_.at(id);
    if (CurrentAttempt(aj) != nullptr) EndAttempt(aj, v1::ATTEMPT_CANCELLED, reason);
    Finish(aj, v1::JOB_FAILED, reason);
  }
}

v1::Job Coordinator::Finish(ActiveJob& aj, v1::JobState state, const std::string& reason) {
  const std::string id = aj.job.id();
  aj.job.set_state(state);
  aj.job.set_reason(reason);
  aj.job.set_end_time_ms(clock_->NowMs());
  Persist(aj).IgnoreError();
  spdlog::info("{}: {}{}", id, v1::JobState_Name(state), reason.empty() ? "" : ": " + reason);
  v1::Job final_job = std::move(aj.job);
  pending_.erase(id);
  active_.erase(id);
  // Watchers notice the job left active_ and read the final state.
  ++version_;
  changed_.SignalAll();
  return final_job;
}

}  // namespace yoke::server
