// The Coordinator class (coordinator/coordinator.h). Over 600 lines on purpose:
// submission, scheduling, the worker protocol and the attempt lifecycle all
// change the same ActiveJob state under one mutex; the pure parts live in
// their own files (scheduler.cc, worker_registry.cc, hang_report.cc,
// rendezvous.cc).
#include "coordinator/coordinator.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/quote.h"
#include "common/status.h"
#include "coordinator/auth_store.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/hang_report.h"
#include "jobspec/job_data_check.h"
#include "jobspec/job_spec_binary.h"
#include "jobspec/job_validate.h"
#include "jobspec/memory_estimate.h"
#include "jobspec/path_confinement.h"
#include "openssl/crypto.h"
#include "spdlog/spdlog.h"

namespace yoke::server {
namespace {

// A heartbeat carries at most this many lines per attempt, each at most
// kMaxLogText bytes; a runaway trainer must not flood the store.
constexpr int kMaxLogLines = 1000;
constexpr size_t kMaxLogText = 4096;
// restart.max_restarts when the spec leaves it unset.
constexpr int kDefaultMaxRestarts = 3;

std::string AttemptKey(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

const v1::Assignment* ShareOf(const v1::Attempt& a, const std::string& worker_id) {
  for (const v1::Assignment& s : a.assignments()) {
    if (s.worker_id() == worker_id) return &s;
  }
  return nullptr;
}

// "trainer on w-1 exited with code 1: <its message>"; in a world of more
// than one rank the trainer's ranks are named too ("trainer of rank 1 on w-2").
std::string ExitReason(const v1::Attempt& a, const v1::Assignment& share,
                       const v1::AttemptStatus& st) {
  const std::string who =
      a.world_size() > 1 ? absl::StrCat("trainer of ", RanksOf(share), " on ", share.worker_id())
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

// Compares secrets in time that does not depend on where they differ.
bool SameSecret(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

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
  ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, store_->ListNonTerminal());
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (v1::Job& job : jobs) {
    ActiveJob& aj = active_[job.id()];
    aj.job = std::move(job);
    aj.spec_digest = common::JobSpecDigest(aj.job.spec());
    aj.version = ++version_;
    aj.last_persist = now;
    ASSIGN_OR_RETURN(aj.last_log_seq, store_->LastLogSeq(aj.job.id()));
    v1::Attempt* a = CurrentAttempt(aj);
    if (aj.job.state() == v1::JOB_PENDING || a == nullptr) {
      aj.job.set_state(v1::JOB_PENDING);
      pending_.insert(aj.job.id());
      continue;
    }
    for (const v1::Assignment& s : a->assignments()) {
      by_worker_[s.worker_id()].insert(aj.job.id());
      registry_.Expect(s.worker_id());
      // A RUNNING job had every share report in before the restart.
      if (aj.job.state() == v1::JOB_RUNNING) aj.reported.insert(s.worker_id());
    }
    rendezvous_.Open(aj.job.id(), a->number());
  }
  if (!active_.empty()) {
    spdlog::info("reloaded {} unfinished jobs; {} workers have one deadline to register again",
                 active_.size(), by_worker_.size());
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------ helpers

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
  absl::Status s = store_->Put(aj.job);
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

// ------------------------------------------------------------------ clients

absl::Status Coordinator::CheckMemory(const v1::JobSpec& spec) const {
  const common::MemoryEstimate est = common::EstimateReplicaMemory(spec);
  if (est.bytes <= 0) return absl::OkStatus();
  // The replicas a job places on one worker share its memory (CPU) or each
  // have a device of their own (CUDA).
  const std::string kind =
      spec.distribution().device().empty() ? "cpu" : spec.distribution().device();
  const int per_worker = std::max(1, spec.distribution().devices_per_worker());
  double largest = 0;
  for (const auto& [id, w] : registry_.workers()) {
    if (!w.registered || !w.alive) continue;
    for (const v1::Device& d : w.devices) {
      if (d.kind() == kind) largest = std::max(largest, static_cast<double>(d.memory_bytes()));
    }
  }
  const double need = kind == "cpu" ? est.bytes * per_worker : est.bytes;
  if (largest <= 0 || need <= largest) return absl::OkStatus();  // no worker reports memory
  return absl::FailedPreconditionError(absl::StrCat(
      "memory: each replica needs at least ", common::FormatBytes(est.bytes),
      kind == "cpu" && per_worker > 1
          ? absl::StrCat(" (", per_worker, " per worker: ", common::FormatBytes(need), ")")
          : "",
      ", but the largest worker has ", common::FormatBytes(largest), "; ", est.largest_layer,
      " alone needs ", common::FormatBytes(est.largest_layer_bytes),
      " (parameters, gradients, optimizer state and activations at the batch size)"));
}

absl::StatusOr<std::string> Coordinator::Submit(const v1::JobSpec& spec, int32_t priority,
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

  absl::MutexLock lock(&mu_);
  const std::string never = CouldEverFit(ShapeOf(spec), Capacities(/*alive_only=*/true));
  if (!never.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("distribution: no registered set of workers can ever run this job: ", never));
  }
  RETURN_IF_ERROR(CheckMemory(spec));
  v1::Job job;
  *job.mutable_spec() = spec;
  job.set_state(v1::JOB_PENDING);
  job.set_reason("waiting for the scheduler");
  job.set_priority(priority);
  job.set_owner(owner);
  job.set_create_time_ms(clock_->NowMs());
  ASSIGN_OR_RETURN(std::string id, store_->Create(job));
  job.set_id(id);
  ActiveJob& aj = active_[id];
  aj.job = std::move(job);
  aj.spec_digest = common::JobSpecDigest(aj.job.spec());
  aj.last_persist = clock_->Now();
  pending_.insert(id);
  Bump(aj, "submitted");
  if (options_.metrics) options_.metrics->OnSubmit();
  schedule_needed_ = true;
  RunScheduler();
  return id;
}

absl::StatusOr<v1::Job> Coordinator::Get(const std::string& id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = active_.find(id);
    if (it != active_.end()) return it->second.job;
  }
  return store_->Get(id);
}

absl::StatusOr<JobListPage> Coordinator::List(const JobListQuery& query) {
  ASSIGN_OR_RETURN(JobListPage page, store_->List(query));
  // The store's copy of a running job may lag on progress; show ours.
  absl::MutexLock lock(&mu_);
  for (v1::Job& job : page.jobs) {
    auto it = active_.find(job.id());
    if (it != active_.end()) job = it->second.job;
  }
  return page;
}

absl::StatusOr<v1::Job> Coordinator::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return store_->Get(id);  // finished: unchanged, or NOT_FOUND
  ActiveJob& aj = it->second;
  if (CurrentAttempt(aj) != nullptr) {
    EndAttempt(aj, v1::ATTEMPT_CANCELLED, "cancelled by the user");
  }
  return Finish(aj, v1::JOB_CANCELLED, "cancelled by the user");
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
  return it == active_.end() ? std::vector<CurvePoint>{} : it->second.curve;
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
  absl::MutexLock lock(&mu_);
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
    if (aj.version > after_version) return JobSnapshot{aj.job, aj.version, aj.message, true};
    if (timed_out) return JobSnapshot{aj.job, aj.version, "", false};
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

// ------------------------------------------------------------------ scheduling

void Coordinator::RunScheduler() {
  schedule_needed_ = false;
  if (pending_.empty()) return;
  std::vector<PendingJob> jobs;
  for (const std::string& id : pending_) {
    const v1::Job& job = active_.at(id).job;
    jobs.push_back({id, ShapeOf(job.spec()), job.priority(), job.create_time_ms()});
  }
  ScheduleResult r = Schedule(std::move(jobs), Capacities(/*alive_only=*/true));
  const int64_t now_ms = clock_->NowMs();
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

// ------------------------------------------------------------------ workers

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& req, const std::string& bound_id) {
  const std::string& requested_id = bound_id.empty() ? req.worker_id() : bound_id;
  std::set<std::pair<std::string, int>> seen;
  for (int i = 0; i < req.devices_size(); ++i) {
    const v1::Device& d = req.devices(i);
    if (d.kind() != "cpu" && d.kind() != "cuda") {
      return absl::InvalidArgumentError(absl::StrCat("devices[", i, "].kind: unknown device kind ",
                                                     common::Quote(d.kind()),
                                                     " (known: cpu, cuda)"));
    }
    if (d.index() < 0 || !seen.insert({d.kind(), d.index()}).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "devices[", i, "].index: ", d.kind(), " index ", d.index(), " is negative or repeated"));
    }
  }
  // An IP address or a DNS name (253 characters at most).
  if (req.address().size() > 253) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: at most 253 characters, got ", req.address().size()));
  }
  // An id is proven by its incarnation token. A certificate-bound id needs
  // none (the certificate proves it), but a stale token is still refused.
  if (options_.worker_incarnation && !requested_id.empty() &&
      (bound_id.empty() || !req.incarnation().empty()) &&
      !SameSecret(req.incarnation(), options_.worker_incarnation(requested_id))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker id ", common::Quote(requested_id),
        req.incarnation().empty() ? " was given without its incarnation token"
                                  : " does not match its incarnation token",
        ": it belongs to another daemon (or to an earlier store); register without an id to "
        "get a new one"));
  }
  absl::MutexLock lock(&mu_);
  std::string new_id;
  if (requested_id.empty() && options_.next_worker_number) {
    // Numbers come from the store, so an id outlives coordinator restarts
    // and is never handed to a second daemon.
    do {
      ASSIGN_OR_RETURN(int64_t n, options_.next_worker_number());
      new_id = absl::StrCat("w-", n);
    } while (registry_.Find(new_id) != nullptr);
  }
  const std::string& use_id = requested_id.empty() ? new_id : requested_id;
  const WorkerEntry* before = use_id.empty() ? nullptr : registry_.Find(use_id);
  const bool was_alive = before != nullptr && before->registered && before->alive;
  const std::string id = registry_.Register(
      use_id, req.hostname(), std::vector<v1::Device>(req.devices().begin(), req.devices().end()));
  registry_.SetAddress(id, req.address());
  spdlog::info("worker {} registered ({}, address {}, {} devices, {} attempts running){}", id,
               req.hostname(), req.address().empty() ? "unknown" : req.address(),
               req.devices_size(), req.attempts_size(), was_alive ? " again while alive" : "");
  for (const v1::AttemptStatus& st : req.attempts()) ApplyStatus(id, st);
  // A share that had reported in but is not listed lost its trainer (the
  // worker restarted, or its trainer died while we were down).
  auto jobs = by_worker_.find(id);
  if (jobs != by_worker_.end()) {
    const std::set<std::string> ids = jobs->second;  // FailAttempt edits the index
    for (const std::string& job_id : ids) {
      ActiveJob& aj = active_.at(job_id);
      v1::Attempt* a = CurrentAttempt(aj);
      if (a == nullptr || !aj.reported.count(id)) continue;
      bool listed = false;
      for (const v1::AttemptStatus& st : req.attempts()) {
        listed |= st.job_id() == job_id && st.attempt() == a->number();
      }
      if (!listed) {
        FailAttempt(aj,
                    absl::StrCat("worker ", id, " registered again without attempt ", a->number(),
                                 " (its trainer is gone)"),
                    /*retryable=*/true);
      }
    }
  }
  ReleaseDrained(id, req.attempts());
  schedule_needed_ = true;
  v1::RegisterWorkerResponse resp;
  resp.set_worker_id(id);
  if (options_.worker_incarnation) resp.set_incarnation(options_.worker_incarnation(id));
  resp.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(const v1::HeartbeatRequest& req) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("worker_id: required");
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(registry_.Heartbeat(req.worker_id()));
  if (req.draining()) registry_.SetDraining(req.worker_id());
  for (const v1::AttemptStatus& st : req.attempts()) ApplyStatus(req.worker_id(), st);
  ReleaseDrained(req.worker_id(), req.attempts());
  if (schedule_needed_) RunScheduler();
  v1::HeartbeatResponse resp;
  for (v1::DesiredAttempt& d : DesiredFor(req.worker_id(), req.attempts())) {
    *resp.add_desired() = std::move(d);
  }
  return resp;
}

void Coordinator::ReleaseDrained(
    const std::string& worker_id,
    const google::protobuf::RepeatedPtrField<v1::AttemptStatus>& observed) {
  auto it = draining_.find(worker_id);
  if (it == draining_.end()) return;
  for (auto d = it->second.begin(); d != it->second.end();) {
    bool still_running = false;
    for (const v1::AttemptStatus& st : observed) {
      still_running |= AttemptKey(st.job_id(), st.attempt()) == d->first &&
                       st.phase() != v1::AttemptStatus::EXITED;
    }
    if (still_running) {
      ++d;
    } else {
      d = it->second.erase(d);
      schedule_needed_ = true;
    }
  }
  if (it->second.empty()) draining_.erase(it);
}

std::vector<v1::DesiredAttempt> Coordinator::DesiredFor(
    const std::string& worker_id,
    const google::protobuf::RepeatedPtrField<v1::AttemptStatus>& observed) {
  std::vector<v1::DesiredAttempt> out;
  auto jobs = by_worker_.find(worker_id);
  if (jobs == by_worker_.end()) return out;
  for (const std::string& job_id : jobs->second) {
    ActiveJob& aj = active_.at(job_id);
    const v1::Attempt* a = CurrentAttempt(aj);
    const v1::Assignment* share = a ? ShareOf(*a, worker_id) : nullptr;
    if (share == nullptr || aj.exited.count(worker_id)) continue;
    v1::DesiredAttempt& d = out.emplace_back();
    d.set_job_id(job_id);
    d.set_attempt(a->number());
    // The spec goes out until the worker lists the attempt: then it has
    // started it from a copy it keeps, and the digest names that copy.
    bool reported = false;
    for (const v1::AttemptStatus& st : observed) {
      reported |= st.job_id() == job_id && st.attempt() == a->number();
    }
    if (!reported) {
      *d.mutable_spec() = aj.job.spec();
      // Who runs every rank, for the trainer's messages about its peers.
      d.mutable_rank_workers()->Reserve(a->world_size());
      for (const v1::Assignment& as : a->assignments()) {
        const WorkerEntry* w = registry_.Find(as.worker_id());
        for (int r = 0; r < as.num_replicas(); ++r) {
          const int rank = as.first_rank() + r;
          while (d.rank_workers_size() <= rank) d.add_rank_workers();
          while (d.rank_addresses_size() <= rank) d.add_rank_addresses();
          d.set_rank_workers(rank, as.worker_id());
          d.set_rank_addresses(rank, w != nullptr ? w->address : "");
        }
      }
    }
    d.set_spec_digest(aj.spec_digest);
    d.set_world_size(a->world_size());
    d.set_first_rank(share->first_rank());
    d.set_num_replicas(share->num_replicas());
    *d.mutable_devices() = share->devices();
    d.set_resume(a->number() > 1);
    if (!reported) {
      // The trainer checks its paths again where the files are.
      *d.mutable_data_roots() = {options_.data_roots.begin(), options_.data_roots.end()};
      *d.mutable_checkpoint_roots() = {options_.checkpoint_roots.begin(),
                                       options_.checkpoint_roots.end()};
    }
    if (!reported && options_.rendezvous_secret) {
      d.set_rendezvous_secret(options_.rendezvous_secret(job_id, a->number()));
    }
  }
  return out;
}

void Coordinator::ApplyStatus(const std::string& worker_id, const v1::AttemptStatus& st) {
  auto it = active_.find(st.job_id());
  if (it == active_.end()) return;  // finished or unknown: the worker stops it
  ActiveJob& aj = it->second;
  v1::Attempt* a = CurrentAttempt(aj);
  if (a == nullptr || a->number() != st.attempt()) return;  // a stale attempt
  const v1::Assignment* share = ShareOf(*a, worker_id);
  if (share == nullptr || aj.exited.count(worker_id)) return;

  if (st.logs_size() > 0) {
    std::vector<v1::LogLine> lines;
    const int n = std::min(st.logs_size(), kMaxLogLines);
    for (int i = 0; i < n; ++i) {
      v1::LogLine& l = lines.emplace_back(st.logs(i));
      l.set_attempt(a->number());
      l.set_rank(share->first_rank());
      l.set_worker_id(worker_id);
      if (l.time_ms() == 0) l.set_time_ms(clock_->NowMs());
      if (l.text().size() > kMaxLogText) l.mutable_text()->resize(kMaxLogText);
    }
    if (st.logs_size() > n) {
      v1::LogLine& l = lines.emplace_back(lines.back());
      l.set_text(absl::StrCat("[yoke: ", st.logs_size() - n, " more lines dropped]"));
    }
    absl::Status s = store_->AppendLogs(aj.job.id(), &lines);
    if (s.ok()) {
      aj.last_log_seq = lines.back().seq();
      changed_.SignalAll();
    } else {
      spdlog::error("storing logs of {}: {}", aj.job.id(), s.ToString());
    }
  }
  bool state_changed = false;
  std::string message;
  // The job's metrics are global rank 0's (every rank trains the same
  // model; rank 0 evaluates and checkpoints). Other ranks' collective
  // sequence numbers are kept for hang reports.
  const bool rank0 = share->first_rank() == 0;
  if (st.has_progress() &&
      (st.progress().collective_seq_issued() > 0 || st.progress().collective_seq_completed() > 0)) {
    aj.collective_done[share->first_rank()] = st.progress().collective_seq_completed();
  }
  if (rank0 && st.epochs_size() > 0) {
    // Every epoch once: an attempt that resumed from a checkpoint taken
    // mid-epoch trains that epoch again and reports it again; its result
    // replaces the one of the failed attempt.
    for (const v1::EpochResult& e : st.epochs()) {
      v1::EpochResult* slot = nullptr;
      for (v1::EpochResult& h : *aj.job.mutable_history()) {
        if (h.epoch() == e.epoch()) slot = &h;
      }
      *(slot != nullptr ? slot : aj.job.add_history()) = e;
    }
    const v1::EpochResult& last = st.epochs(st.epochs_size() - 1);
    message = absl::StrCat("epoch ", last.epoch(), " done: train_loss ", last.train_loss(),
                           ", test_accuracy ", last.test_accuracy());
    state_changed = true;  // the metric history is written at once, like states
  }
  if (rank0 && st.has_progress()) {
    *aj.job.mutable_progress() = st.progress();
    aj.dirty = true;
    if (aj.curve.empty() || aj.curve.back().step != st.progress().step()) {
      if (static_cast<int>(aj.curve.size()) >= kMaxCurvePoints) {
        // Thin to every other point: the curve keeps its shape at half the
        // resolution, and memory stays bounded however long the job runs.
        size_t k = 0;
        for (size_t i = 0; i < aj.curve.size(); i += 2) aj.curve[k++] = aj.curve[i];
        aj.curve.resize(k);
      }
      aj.curve.push_back({st.progress().step(), st.progress().loss(), st.progress().accuracy()});
    }
    if (aj.failed_at_ms > 0 && st.progress().window_steps() > 0) {
      if (options_.metrics)
        options_.metrics->OnRecovered((clock_->NowMs() - aj.failed_at_ms) / 1e3);
      aj.failed_at_ms = 0;
    }
    if (message.empty()) message = "progress";
  }
  if (st.phase() == v1::AttemptStatus::RUNNING) {
    aj.reported.insert(worker_id);
    if (aj.job.state() == v1::JOB_SCHEDULED &&
        static_cast<int>(aj.reported.size()) == a->assignments_size()) {
      a->set_state(v1::ATTEMPT_RUNNING);
      aj.job.set_state(v1::JOB_RUNNING);
      if (options_.metrics && a->number() == 1) {
        options_.metrics->OnScheduled((clock_->NowMs() - aj.job.create_time_ms()) / 1e3);
      }
      message = absl::StrCat("attempt ", a->number(), " running");
      state_changed = true;
    }
  }
  if (st.phase() == v1::AttemptStatus::EXITED) {
    aj.exited[worker_id] = st.exit_code();
    if (st.exit_code() != 0) {
      std::map<std::string, std::string> addresses;  // to name the blamed workers' addresses
      for (const v1::Assignment& as : a->assignments()) {
        if (const WorkerEntry* w = registry_.Find(as.worker_id())) addresses[w->id] = w->address;
      }
      // Exit code 2 is a bad spec or input: a retry would fail the same way.
      FailAttempt(aj, AttributeHang(ExitReason(*a, *share, st), *a, aj.collective_done, addresses),
                  /*retryable=*/st.exit_code() != 2);
      return;  // `aj` may be gone
    }
    if (rank0) *aj.job.mutable_result() = st.result();
    if (static_cast<int>(aj.exited.size()) == a->assignments_size()) {
      a->set_state(v1::ATTEMPT_SUCCEEDED);
      a->set_end_time_ms(clock_->NowMs());
      Unindex(aj);
      Finish(aj, v1::JOB_SUCCEEDED, "");
      return;
    }
  }
  if (state_changed) Persist(aj).IgnoreError();
  if (!message.empty()) Bump(aj, std::move(message));
}

// ------------------------------------------------------------------ endings

void Coordinator::Unindex(ActiveJob& aj) {
  v1::Attempt* a = CurrentAttempt(aj);
  if (a == nullptr) return;
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
        Draining{kind, std::vector<int>(s.devices().begin(), s.devices().end())};
  }
  Unindex(aj);
}

void Coordinator::FailAttempt(ActiveJob& aj, const std::string& reason, bool retryable) {
  v1::Attempt* a = CurrentAttempt(aj);
  if (a == nullptr) return;
  const int number = a->number();
  EndAttempt(aj, v1::ATTEMPT_FAILED, reason);
  const v1::RestartPolicy& policy = aj.job.spec().restart();
  const int max_restarts = policy.has_max_restarts() ? policy.max_restarts() : kDefaultMaxRestarts;
  const int restarts_used = aj.job.attempts_size() - 1;
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
  aj.collective_done.clear();
  pending_.insert(aj.job.id());
  schedule_needed_ = true;
  Persist(aj).IgnoreError();
  Bump(aj, aj.job.reason());
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
  const absl::Time now = clock_->Now();
  for (auto& [id, aj] : active_) {
    if (aj.dirty && now - aj.last_persist >= options_.progress_flush_interval) {
      Persist(aj).IgnoreError();
    }
  }
  if (schedule_needed_) RunScheduler();
}

}  // namespace yoke::server
