// The Coordinator (coordinator/coordinator.h), part 2 of 5: what clients
// call: submission (with its fleet and memory checks), queries, cancel,
// the worker list, and waiting on a job or its logs.
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/status.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/coordinator_metrics.h"
#include "jobspec/job_data_check.h"
#include "jobspec/job_spec_binary.h"
#include "jobspec/job_validate.h"
#include "jobspec/memory_estimate.h"
#include "jobspec/path_confinement.h"

namespace yoke::server {

using coordinator_internal::AttemptKey;

absl::Status Coordinator::CheckMemory(const v1::JobSpec& spec,
                                      const common::MemoryEstimate& est) const {
  // A PS task takes a rank's share of its worker's memory as a replica does.
  const double ps_task = common::EstimatePsTaskMemory(spec, est);
  if (est.bytes <= 0 && ps_task <= 0) return absl::OkStatus();
  // Every replica gets a device of its own: a GPU's memory, or a CPU
  // replica's share of its worker's --memory-limit (which its trainer's
  // memory cgroup enforces), so one replica is compared with one device.
  const std::string kind =
      spec.distribution().device().empty() ? "cpu" : spec.distribution().device();
  double largest = 0;
  for (const auto& [id, w] : registry_.workers()) {
    if (!w.registered || !w.alive) continue;
    for (const v1::Device& d : w.devices) {
      if (d.kind() == kind) largest = std::max(largest, static_cast<double>(d.memory_bytes()));
    }
  }
  if (largest <= 0) return absl::OkStatus();  // no worker reports memory
  if (ps_task > largest && ps_task > est.bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "memory: each PS task needs at least ", common::FormatBytes(ps_task),
        " (its shard's values, gradients and optimizer state with every worker's pushes and "
        "answers; docs/parameter_servers.md), but the largest share of a "
        "worker's memory is ",
        common::FormatBytes(largest),
        " (its --memory-limit over its ranks); add distribution.parameter_servers to split the "
        "model over more of them"));
  }
  if (est.bytes <= largest) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "memory: each replica",
      est.stages > 1 ? absl::StrCat(" (one stage of ", est.stages, ")") : std::string(),
      " needs at least ", common::FormatBytes(est.bytes),
      kind == "cpu" ? ", but the largest replica share is "
                    : absl::StrCat(", but the largest ", kind, " device has "),
      common::FormatBytes(largest),
      kind == "cpu" ? " (a worker's --memory-limit over its replicas); " : "; ",
      est.data_bytes > est.largest_layer_bytes
          ? absl::StrCat("the training set's shuffle order alone needs ",
                         common::FormatBytes(est.data_bytes), " (8 bytes an example)")
          : absl::StrCat(est.largest_layer, " alone needs ",
                         common::FormatBytes(est.largest_layer_bytes),
                         " (parameters, gradients, optimizer state and activations at the batch "
                         "size)")));
}

absl::Status Coordinator::CheckQuotas(const v1::JobSpec& spec, const std::string& owner) const {
  const int64_t max_jobs = options_.max_pending_jobs_per_submitter;
  const int64_t max_bytes = options_.max_pending_spec_bytes_per_submitter;
  if (max_jobs <= 0 && max_bytes <= 0) return absl::OkStatus();
  int64_t jobs = 0;
  int64_t bytes = 0;
  for (const std::string& id : pending_) {
    auto it = active_.find(id);
    if (it == active_.end() || it->second.job.owner() != owner) continue;
    ++jobs;
    bytes += static_cast<int64_t>(it->second.spec->size());
  }
  const std::string who = SubmitterName(owner);
  if (max_jobs > 0 && jobs >= max_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_pending_jobs_per_submitter: ", who, " already has ", jobs,
        " jobs waiting to be placed, the coordinator's limit; cancel one, or submit again "
        "once one has started"));
  }
  const int64_t size = static_cast<int64_t>(spec.ByteSizeLong());
  if (max_bytes > 0 && bytes + size > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("max_pending_spec_bytes_per_submitter: ", who, " has ", jobs,
                     " jobs waiting whose specs take ", bytes, " bytes; this one's ", size,
                     " would pass the coordinator's limit of ", max_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::TakeSubmitToken(const std::string& owner) {
  const int64_t per_minute = options_.max_submits_per_minute_per_submitter;
  if (per_minute <= 0) return absl::OkStatus();
  const absl::Time now = clock_->Now();
  auto [it, fresh] = submit_buckets_.try_emplace(owner);
  SubmitBucket& b = it->second;
  if (fresh) {
    b.tokens = static_cast<double>(per_minute);
  } else {
    const double refill = absl::ToDoubleSeconds(now - b.refilled) * per_minute / 60.0;
    b.tokens = std::min<double>(static_cast<double>(per_minute), b.tokens + std::max(0.0, refill));
  }
  b.refilled = now;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return absl::OkStatus();
  }
  const double wait_s = (1 - b.tokens) * 60.0 / per_minute;
  return absl::ResourceExhaustedError(absl::StrCat(
      "max_submits_per_minute_per_submitter: ", SubmitterName(owner), " made ", per_minute,
      " submissions within the last minute, the coordinator's limit; try again in ",
      absl::FormatDuration(absl::Ceil(absl::Seconds(wait_s), absl::Seconds(1)))));
}

absl::StatusOr<std::string> Coordinator::Submit(const v1::JobSpec& spec, int32_t priority,
                                                const std::string& owner) {
  {
    // Every call counts, accepted or not: refusing a flood costs validation too.
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(TakeSubmitToken(owner));
  }
  return SubmitAdmitted(spec, priority, owner);
}

absl::StatusOr<std::string> Coordinator::Submit(
    const std::function<absl::StatusOr<v1::JobSpec>()>& make_spec, int32_t priority,
    const std::string& owner) {
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(TakeSubmitToken(owner));
  }
  ASSIGN_OR_RETURN(v1::JobSpec spec, make_spec());
  return SubmitAdmitted(spec, priority, owner);
}

absl::StatusOr<std::string> Coordinator::SubmitAdmitted(const v1::JobSpec& spec, int32_t priority,
                                                        const std::string& owner) {
  RETURN_IF_ERROR(common::ValidateJobSpec(spec));
  RETURN_IF_ERROR(common::ValidateJobPaths(spec, options_.data_roots, options_.checkpoint_roots));
  // An image folder this machine can see (a shared file system, or a local
  // cluster) is checked now, with the trainer's rules and message, so an
  // empty class folder is refused here rather than failing the first
  // attempt. Roots that exist only on the workers, and the other formats,
  // are left to the trainer; each class stops at its first image, so even a
  // large tree costs a few directory reads per class.
  if (auto data = common::CheckJobData(spec, common::DataCheck::kLocalImageFolders); !data.ok()) {
    return data.status();
  }
  // An idx training set this machine can see is counted at its real shape;
  // its header is read before the lock, as any file system may be slow, and
  // the estimate made, as it walks every layer of the model.
  const common::MemoryEstimate memory =
      common::EstimateReplicaMemory(spec, common::VisibleIdxShape(spec));

  absl::MutexLock lock(&mu_);
  const GangShape shape = ShapeOf(spec);
  const std::string never = CouldEverFit(shape, Capacities(/*alive_only=*/true));
  if (!never.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("distribution: no registered set of workers can ever run this job: ", never));
  }
  RETURN_IF_ERROR(CheckMemory(spec, memory));
  RETURN_IF_ERROR(CheckQuotas(spec, owner));
  const int64_t cap = options_.max_running_devices_per_submitter;
  if (cap > 0 && shape.devices() > cap) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_running_devices_per_submitter: this job needs ", shape.devices(),
        " devices, more than the coordinator lets one submitter run at once (", cap, ")"));
  }
  // The spec is serialized once and never copied parsed (ActiveJob).
  v1::Job job;
  job.set_state(v1::JOB_PENDING);
  job.set_reason("waiting for the scheduler");
  job.set_priority(priority);
  job.set_owner(owner);
  job.set_create_time_ms(clock_->NowMs());
  std::string serialized = spec.SerializeAsString();
  ASSIGN_OR_RETURN(std::string id, store_->CreateWithSpec(job, serialized));
  job.set_id(id);
  ActiveJob& aj = active_[id];
  Hold(aj, std::move(job), spec, std::move(serialized));
  aj.last_persist = clock_->Now();
  pending_.insert(id);
  Bump(aj, "submitted");
  if (options_.metrics) options_.metrics->OnSubmit();
  schedule_needed_ = true;
  // A pass over every pending job costs as much as there are: run one now
  // only when this job could start on the free devices, were it alone.
  // Otherwise it cannot start now, nor change where others start (but for
  // the rare hold it takes over), so it gets the reason it has alone, and
  // the next tick's pass (within half a second) the final word; a flood of
  // jobs that wait then costs a pass a tick, not a pass a job.
  ScheduleResult alone =
      Schedule({{id, shape, priority, 0, owner}}, Capacities(/*alive_only=*/true));
  if (!alone.placed.empty()) {
    RunScheduler();
  } else if (auto r = alone.pending.find(id); r != alone.pending.end()) {
    aj.job.set_reason(r->second);
  }
  return id;
}

absl::StatusOr<v1::Job> Coordinator::Get(const std::string& id) {
  v1::Job job;
  std::shared_ptr<const std::string> spec;
  {
    absl::MutexLock lock(&mu_);
    auto it = active_.find(id);
    if (it == active_.end()) return store_->Get(id);
    job = it->second.job;
    spec = it->second.spec;
  }
  return WithSpec(std::move(job), *spec);  // parsed outside the lock
}

absl::StatusOr<JobListPage> Coordinator::List(const JobListQuery& query) {
  ASSIGN_OR_RETURN(JobListPage page, store_->List(query));
  // The store's copy of a running job may lag on progress; show ours, with
  // the spec the store read (whole, or its name for a summary).
  absl::MutexLock lock(&mu_);
  for (v1::Job& job : page.jobs) {
    auto it = active_.find(job.id());
    if (it == active_.end()) continue;
    const bool has_spec = job.has_spec();
    v1::JobSpec spec;
    spec.Swap(job.mutable_spec());
    job = it->second.job;
    if (has_spec) {
      job.mutable_spec()->Swap(&spec);
    } else {
      job.clear_spec();
    }
  }
  return page;
}

absl::StatusOr<v1::Job> Coordinator::Cancel(const std::string& id) {
  v1::Job job;
  std::shared_ptr<const std::string> spec;
  {
    absl::MutexLock lock(&mu_);
    auto it = active_.find(id);
    if (it == active_.end()) return store_->Get(id);  // finished: unchanged, or NOT_FOUND
    ActiveJob& aj = it->second;
    if (CurrentAttempt(aj) != nullptr) {
      EndAttempt(aj, v1::ATTEMPT_CANCELLED, "cancelled by the user");
    }
    spec = aj.spec;
    job = Finish(aj, v1::JOB_CANCELLED, "cancelled by the user");
  }
  return WithSpec(std::move(job), *spec);
}

std::vector<v1::Job> Coordinator::RunningJobs() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> out;
  for (const auto& [id, aj] : active_) {
    if (aj.job.state() == v1::JOB_RUNNING) out.push_back(aj.job);
  }
  return out;
}

absl::StatusOr<std::map<v1::JobState, int64_t>> Coordinator::CountJobsByState() {
  // Every state change is persisted at once (progress is what waits).
  return store_->CountByState();
}

std::vector<CurvePoint> Coordinator::Curve(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  return it == active_.end() ? std::vector<CurvePoint>{} : it->second.curve.points;
}

absl::StatusOr<std::vector<v1::LogLine>> Coordinator::TailLogs(const std::string& id, int n) {
  ASSIGN_OR_RETURN(int64_t last, store_->LastLogSeq(id));
  return store_->ReadLogs(id, std::max<int64_t>(0, last - n), n);
}

std::vector<v1::Worker> Coordinator::ListWorkers() {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerCapacity> caps = Capacities(/*alive_only=*/false);
  std::map<std::string, const WorkerCapacity*> cap_of;
  for (const WorkerCapacity& c : caps) cap_of[c.id] = &c;
  std::vector<v1::Worker> out;
  for (const auto& [id, w] : registry_.workers()) {
    v1::Worker& p = out.emplace_back();
    p.set_id(id);
    p.set_hostname(w.hostname);
    p.set_address(w.address);
    p.set_auth(options_.workers_authenticated ? "certificate" : "insecure");
    for (const v1::Device& d : w.devices) *p.add_devices() = d;
    p.set_alive(w.registered && w.alive);
    p.set_reason(w.reason);
    p.set_last_heartbeat_ms(absl::ToUnixMillis(w.last_heartbeat));
    if (w.registered) p.set_register_time_ms(absl::ToUnixMillis(w.register_time));
    auto jobs = by_worker_.find(id);
    if (jobs != by_worker_.end()) {
      for (const std::string& job_id : jobs->second) {
        const v1::Job& job = active_.at(job_id).job;
        p.add_running(AttemptKey(job_id, job.attempts(job.attempts_size() - 1).number()));
      }
    }
    auto c = cap_of.find(id);
    if (c != cap_of.end() && p.alive()) {
      int free_cpu = 0, free_cuda = 0;
      for (const v1::Device& d : w.devices) {
        auto taken = c->second->allocated.find(d.kind());
        const bool busy = taken != c->second->allocated.end() && taken->second.count(d.index());
        if (busy) continue;
        free_cpu += d.kind() == "cpu";
        free_cuda += d.kind() == "cuda";
      }
      p.set_free_cpu(free_cpu);
      p.set_free_cuda(free_cuda);
    }
  }
  return out;
}

absl::StatusOr<JobSnapshot> Coordinator::WaitForJob(const std::string& id, uint64_t after_version,
                                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::ReleasableMutexLock lock(&mu_);
  bool timed_out = false;
  while (true) {
    auto it = active_.find(id);
    if (it == active_.end()) {
      ASSIGN_OR_RETURN(v1::Job job, store_->Get(id));
      JobSnapshot snap;
      snap.message = job.state() == v1::JOB_SUCCEEDED ? "succeeded" : job.reason();
      snap.job = std::move(job);
      snap.version = UINT64_MAX;
      snap.changed = true;
      return snap;
    }
    const ActiveJob& aj = it->second;
    if (aj.version > after_version || timed_out) {
      JobSnapshot snap{aj.job, aj.version, "", aj.version > after_version};
      if (snap.changed) snap.message = aj.message;
      std::shared_ptr<const std::string> spec = aj.spec;
      lock.Release();  // the spec is parsed outside the lock
      snap.job = WithSpec(std::move(snap.job), *spec);
      return snap;
    }
    // Looked up again after the wait: the job may have finished meanwhile.
    timed_out = changed_.WaitWithDeadline(&mu_, deadline);
  }
}

absl::StatusOr<std::vector<v1::LogLine>> Coordinator::ReadLogs(const std::string& id,
                                                               int64_t since_seq, int limit) {
  return store_->ReadLogs(id, since_seq, limit);
}

absl::StatusOr<bool> Coordinator::WaitForLogs(const std::string& id, int64_t since_seq,
                                              absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (true) {
    auto it = active_.find(id);
    if (it == active_.end()) {
      RETURN_IF_ERROR(store_->Get(id).status());  // NOT_FOUND vs finished
      return true;
    }
    if (it->second.last_log_seq > since_seq) return false;
    if (changed_.WaitWithDeadline(&mu_, deadline)) return false;
  }
}

}  // namespace yoke::server
