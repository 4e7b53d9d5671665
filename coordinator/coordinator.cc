// The Coordinator (coordinator/coordinator.h), part 1 of 5: construction,
// reloading unfinished jobs after a restart, the helpers every part shares
// and the periodic Tick. The other parts: coordinator_jobs.cc (clients),
// coordinator_workers.cc (the worker protocol), coordinator_status.cc
// (applying an attempt's status), coordinator_lifecycle.cc (scheduling,
// ending attempts, the restart policy). The pure parts live in their own
// files (scheduler.cc, worker_registry.cc, hang_report.cc, rendezvous.cc).
#include "coordinator/coordinator.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "coordinator/auth_store.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/hang_report.h"
#include "jobspec/job_spec_binary.h"
#include "jobspec/ps_check.h"
#include "spdlog/spdlog.h"

namespace yoke::server {

namespace coordinator_internal {

std::string AttemptKey(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

int MaxRestarts(const v1::Job& job) {
  const v1::RestartPolicy& policy = job.spec().restart();
  return policy.has_max_restarts() ? policy.max_restarts() : kDefaultMaxRestarts;
}

bool OutOfMemory(absl::string_view reason) { return absl::StrContains(reason, "out of memory"); }

int RestartsUsed(const v1::Job& job) {
  int used = std::max(job.attempts_size() - 1, 0);
  for (const v1::Attempt& a : job.attempts()) {
    for (const v1::Assignment& s : a.assignments()) used += std::max(s.incarnation(), 0);
  }
  return used;
}

const v1::Assignment* ShareOf(const v1::Attempt& a, const std::string& worker_id) {
  for (const v1::Assignment& s : a.assignments()) {
    if (s.worker_id() == worker_id) return &s;
  }
  return nullptr;
}

}  // namespace coordinator_internal

using coordinator_internal::ShareOf;

void UseAuthStoreForWorkerIds(AuthStore* auth, CoordinatorOptions* options) {
  options->next_worker_number = [auth] { return auth->NextWorkerNumber(); };
  options->worker_incarnation = [auth](const std::string& id) {
    return auth->WorkerIncarnation(id);
  };
}

Coordinator::Coordinator(JobStore* store, const common::Clock* clock, CoordinatorOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      registry_(clock, options_.heartbeat_deadline) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(JobStore* store,
                                                                 const common::Clock* clock,
                                                                 CoordinatorOptions options) {
  std::unique_ptr<Coordinator> c(new Coordinator(store, clock, std::move(options)));
  RETURN_IF_ERROR(c->Reload());
  return c;
}

Coordinator::~Coordinator() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, aj] : active_) {
    if (aj.dirty) Persist(aj).IgnoreError();
  }
}

absl::Status Coordinator::Reload() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  // One job parsed at a time: each is held serialized before the next.
  RETURN_IF_ERROR(store_->ForEachNonTerminal([&](v1::Job job) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    ActiveJob& aj = active_[job.id()];
    v1::JobSpec spec;
    spec.Swap(job.mutable_spec());
    std::string serialized = spec.SerializeAsString();
    Hold(aj, std::move(job), spec, std::move(serialized));
    aj.version = ++version_;
    aj.last_persist = now;
    return absl::OkStatus();
  }));
  for (auto& [id, aj] : active_) {
    ASSIGN_OR_RETURN(aj.last_log_seq, store_->LastLogSeq(id));
    v1::Attempt* a = CurrentAttempt(aj);
    if (aj.job.state() == v1::JOB_PENDING || a == nullptr) {
      aj.job.set_state(v1::JOB_PENDING);
      pending_.insert(id);
      continue;
    }
    for (const v1::Assignment& s : a->assignments()) {
      by_worker_[s.worker_id()].insert(id);
      registry_.Expect(s.worker_id());
      // A RUNNING job had every share report in before the restart.
      if (aj.job.state() == v1::JOB_RUNNING) aj.reported.insert(s.worker_id());
      // A share whose trainer exited: its worker has forgotten it.
      if (s.exited()) aj.exited[s.worker_id()] = s.exit_code();
      if (s.exited() && s.exit_code() != 0 && !aj.echo) {
        // Only an exit that waited for a peer's is recorded without failing
        // the attempt: it fails it if the peer's own reason does not come.
        aj.echo = ActiveJob::Echo{
            absl::StrCat("trainer of ", RanksOf(s), " on ", s.worker_id(), " exited with code ",
                         s.exit_code(), " (before the coordinator restarted)"),
            s.exit_code() != 2, clock_->NowMs() + options_.peer_exit_grace_ms};
      }
    }
    rendezvous_.Open(id, a->number());
  }
  if (!active_.empty()) {
    spdlog::info("reloaded {} unfinished jobs; {} workers have one deadline to register again",
                 active_.size(), by_worker_.size());
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ helpers

void Coordinator::Hold(ActiveJob& aj, v1::Job job, const v1::JobSpec& spec,
                       std::string serialized) {
  aj.spec = std::make_shared<const std::string>(std::move(serialized));
  aj.spec_digest = common::JobSpecDigest(spec);
  v1::JobSpec* head = job.mutable_spec();
  head->Clear();
  head->set_name(spec.name());
  if (spec.has_distribution()) *head->mutable_distribution() = spec.distribution();
  if (spec.has_checkpoint()) *head->mutable_checkpoint() = spec.checkpoint();
  if (spec.has_restart()) *head->mutable_restart() = spec.restart();
  if (spec.has_logging()) *head->mutable_logging() = spec.logging();
  head->set_max_run_seconds(spec.max_run_seconds());
  aj.job = std::move(job);
  aj.restarts_alone = common::RestartsReplicasAlone(spec);
}

v1::Job Coordinator::WithSpec(v1::Job job, const std::string& spec) {
  // Stored by this coordinator, so it parses; ParseFromString clears the head.
  if (!job.mutable_spec()->ParseFromString(spec)) {
    spdlog::error("{}: the held spec does not parse", job.id());
  }
  return job;
}

v1::Attempt* Coordinator::CurrentAttempt(ActiveJob& aj) {
  const v1::JobState s = aj.job.state();
  if ((s != v1::JOB_SCHEDULED && s != v1::JOB_RUNNING) || aj.job.attempts_size() == 0) {
    return nullptr;
  }
  return aj.job.mutable_attempts(aj.job.attempts_size() - 1);
}

void Coordinator::Bump(ActiveJob& aj, std::string message) {
  aj.version = ++version_;
  aj.message = std::move(message);
  changed_.SignalAll();
}

absl::Status Coordinator::Persist(ActiveJob& aj) {
  absl::Status s = store_->PutWithSpec(aj.job, *aj.spec);
  if (!s.ok()) {
    // Kept dirty: the next flush tries again.
    spdlog::error("persisting {}: {}", aj.job.id(), s.ToString());
    aj.dirty = true;
    return s;
  }
  aj.dirty = false;
  aj.last_persist = clock_->Now();
  return absl::OkStatus();
}

std::vector<WorkerCapacity> Coordinator::Capacities(bool alive_only) {
  std::vector<WorkerCapacity> out;
  for (const auto& [id, w] : registry_.workers()) {
    if (!w.registered || (alive_only && (!w.alive || w.draining))) continue;
    WorkerCapacity c;
    c.id = id;
    c.devices = w.devices;
    auto jobs = by_worker_.find(id);
    if (jobs != by_worker_.end()) {
      for (const std::string& job_id : jobs->second) {
        ActiveJob& aj = active_.at(job_id);
        const v1::Attempt* a = CurrentAttempt(aj);
        const v1::Assignment* share = a ? ShareOf(*a, id) : nullptr;
        if (share == nullptr) continue;
        const std::string kind = ShapeOf(aj.job.spec()).kind;
        c.allocated[kind].insert(share->devices().begin(), share->devices().end());
      }
    }
    auto drain = draining_.find(id);
    if (drain != draining_.end()) {
      for (const auto& [key, d] : drain->second) {
        c.allocated[d.kind].insert(d.devices.begin(), d.devices.end());
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

// ------------------------------------------------------------------ tick

void Coordinator::Tick() {
  absl::MutexLock lock(&mu_);
  for (const LostWorker& lost : registry_.CheckLiveness()) {
    spdlog::warn("{}", lost.reason);
    draining_.erase(lost.id);
    auto jobs = by_worker_.find(lost.id);
    if (jobs == by_worker_.end()) continue;
    const std::set<std::string> ids = jobs->second;  // FailAttempt edits the index
    for (const std::string& job_id : ids) {
      auto it = active_.find(job_id);
      if (it == active_.end()) continue;
      std::string reason = lost.reason;
      const v1::Attempt* a = CurrentAttempt(it->second);
      const v1::Assignment* share = a ? ShareOf(*a, lost.id) : nullptr;
      if (share != nullptr && a->world_size() > 1) {
        absl::StrAppend(&reason, " (it ran ", RanksOf(*share), " of ", a->world_size(), ")");
      }
      FailAttempt(it->second, reason, /*retryable=*/true);
    }
  }
  StopOverdueJobs();
  FailEchoedAttempts();
  const absl::Time now = clock_->Now();
  for (auto& [id, aj] : active_) {
    if (aj.dirty && now - aj.last_persist >= options_.progress_flush_interval) {
      Persist(aj).IgnoreError();
    }
  }
  if (schedule_needed_) RunScheduler();
}

}  // namespace yoke::server
