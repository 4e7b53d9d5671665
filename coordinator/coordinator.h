// Coordinator: the job lifecycle, behind the gRPC services (grpc_service.h).
//
// The coordinator <-> worker protocol (docs/protocol.md has the long form):
//   1. A worker calls RegisterWorker with its devices and the attempts it is
//      already running (non-empty after a coordinator restart) and, when it
//      had one, its old id, which it keeps. The reply carries its id and the
//      heartbeat interval.
//   2. Every interval it calls Heartbeat with what it observes: each attempt
//      it runs or has finished, progress, epochs finished, new log lines and,
//      once the trainer exited, the exit code and result. The coordinator
//      applies them (SCHEDULED -> RUNNING once every assignment of the
//      attempt reported RUNNING; exit 0 everywhere -> SUCCEEDED with rank 0's
//      result; any other exit fails the attempt), runs the scheduler if
//      anything freed or queued, and replies with the desired state: the full
//      list of attempts that worker should run, each with its spec only
//      while the heartbeat does not list it (afterwards (job, attempt) and
//      the spec's SHA-256 name it). A job's progress, epoch
//      history and result are global rank 0's; every share's last
//      collective sequence number is kept, and a collective timeout's reason
//      gets the workers of the ranks that never arrived and each rank's last
//      completed collective appended (coordinator/hang_report.h). One share
//      failing fails the attempt: the other shares leave their workers'
//      desired state (so their trainers are stopped) and the attempt's
//      rendezvous namespace is dropped.
//   3. The worker converges: it starts desired attempts it does not run and
//      stops the ones no longer desired. It reports a finished attempt until
//      the desired list no longer holds it. Devices of a stopped attempt stay
//      allocated until the worker stops reporting it as running, so a new
//      attempt never shares a device with a dying trainer.
//   4. A worker silent for the deadline (default 10 s) is lost; its attempts
//      fail with "worker w-2 missed heartbeats for 10s". A heartbeat from an
//      unknown or lost worker gets NOT_FOUND and the worker registers again.
//   5. A failed attempt is retried while spec.restart.max_restarts allows
//      (exit code 2, a bad spec or input, is never retried): the job goes
//      back to PENDING and the next attempt resumes from the newest
//      checkpoint in spec.checkpoint.dir.
//   6. Restart: the coordinator reloads every unfinished job from the store.
//      SCHEDULED and RUNNING jobs stay so; the workers they name get one
//      heartbeat deadline to register again (listing their attempts, which
//      keep running) before their attempts fail.
//
// State: one mutex guards the in-memory view of every unfinished job, the
// index of attempts by worker, the worker registry and the pending set.
// Heartbeat work is O(attempts of that worker). The store is the durable
// copy: every state change (and every finished epoch) is written at once,
// in one transaction, under the lock; progress and pending reasons only every
// `progress_flush_interval` per job. Finished jobs live only in the store.
//
// Watchers (WatchJob, GetJobLogs --follow) wait on a condition variable that
// is signalled on every change, with a per-job version to tell what is new.
//
// Thread-safety: every public method may be called from any thread.
#ifndef YOKE_COORDINATOR_COORDINATOR_H_
#define YOKE_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/job_store.h"
#include "coordinator/rendezvous.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"
#include "jobspec/memory_estimate.h"
#include "proto/yoke/v1/coordinator.pb.h"
#include "telemetry/epoch_history.h"

namespace yoke::server {

class CoordinatorMetrics;

struct CoordinatorOptions {
  // A worker silent for this long is lost.
  absl::Duration heartbeat_deadline = absl::Seconds(10);
  // The period workers are told to heartbeat at.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // Progress and pending reasons reach the store at most this often per job.
  absl::Duration progress_flush_interval = absl::Seconds(5);
  // How long a trainer's failure that only echoes a peer's ("Connection
  // closed by peer") waits for that peer's own exit, which says why the
  // attempt failed (out of memory: not retried) before it is taken as the
  // attempt's failure.
  int64_t peer_exit_grace_ms = 3000;
  // Absolute directories jobs may read data from / write checkpoints to;
  // empty: anywhere.
  std::vector<std::string> data_roots;
  std::vector<std::string> checkpoint_roots;
  // The rendezvous secret of (job, attempt) (coordinator/auth_store.h), sent to
  // the attempt's workers with its spec; unset: none (--insecure).
  std::function<std::string(const std::string& job_id, int attempt)> rendezvous_secret;
  // Shown by ListWorkers as each worker's Worker.auth.
  bool workers_authenticated = false;
  // Worker identity across coordinator restarts (coordinator/auth_store.h): the
  // number of the next new worker id, and the incarnation token of an id. A
  // daemon that registers again with an id must bring its token. Unset (unit
  // tests): ids are numbered in memory and tokens are not checked.
  std::function<absl::StatusOr<int64_t>()> next_worker_number;
  std::function<std::string(const std::string& worker_id)> worker_incarnation;
  // Per-submitter quotas on PENDING jobs (v1::CoordinatorConfig): how many,
  // and their specs' serialized bytes together. 0: no limit.
  int64_t max_pending_jobs_per_submitter = 0;
  int64_t max_pending_spec_bytes_per_submitter = 0;
  // SubmitJob calls one submitter may make per minute (a token bucket that
  // holds a minute's worth); 0: no limit.
  int64_t max_submits_per_minute_per_submitter = 0;
  // Devices one submitter's scheduled and running jobs may hold together
  // (the scheduler holds back the rest, coordinator/scheduler.h); 0: no limit.
  int64_t max_running_devices_per_submitter = 0;
  // Seconds a job may run, from its first start, when its spec does not set
  // max_run_seconds; 0: no limit.
  int64_t default_max_run_seconds = 0;
  // Counts submissions, scheduling latency, restarts and recoveries
  // (coordinator/coordinator_metrics.h); must outlive the coordinator. Unset: none.
  CoordinatorMetrics* metrics = nullptr;
};

class AuthStore;
// Sets options->next_worker_number and worker_incarnation from `auth`, as
// yoke-coordinator does: numbers and tokens that survive a restart.
void UseAuthStoreForWorkerIds(AuthStore* auth, CoordinatorOptions* options);

// One logged training step of a running job, for the dashboard's curves.
struct CurvePoint {
  int64_t step = 0;
  double loss = 0;
  double accuracy = 0;
};

// A running job's curve, bounded however long it runs: the logged steps at
// an even spacing of reports (every `stride`-th distinct step reported,
// from the first), and the newest one always last
// (coordinator_internal::AddCurvePoint).
struct JobCurve {
  std::vector<CurvePoint> points;
  int64_t stride = 1;
  int64_t reports = 0;             // distinct steps reported so far
  bool newest_off_stride = false;  // points.back() is the newest, kept only until the next
};

// One state of a watched job.
struct JobSnapshot {
  v1::Job job;
  uint64_t version = 0;  // compare with the next WaitForJob's after_version
  std::string message;   // what changed, for people
  bool changed = false;  // false: the wait timed out (job is the current one)
};

class Coordinator {
 public:
  // Reloads every unfinished job from `store`. `store` and `clock` must
  // outlive the coordinator. Fails if the store cannot be read.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(JobStore* store,
                                                             const common::Clock* clock,
                                                             CoordinatorOptions options);
  // Writes progress not yet flushed.
  ~Coordinator();

  // ---- clients

  // Validates (INVALID_ARGUMENT naming the field), checks the alive fleet
  // could ever hold it (FAILED_PRECONDITION; accepted while no worker is
  // registered) and the owner's quotas (RESOURCE_EXHAUSTED naming the
  // option), stores it PENDING and returns its id. `owner` is the
  // submitter's identity ("" when unauthenticated).
  absl::StatusOr<std::string> Submit(const v1::JobSpec& spec, int32_t priority,
                                     const std::string& owner = "");
  // The same, for a spec that must first be made from the caller's input
  // (the YAML of SubmitJobRequest.spec_yaml): the submit rate is charged
  // before `make_spec` runs, so a flood of costly input is refused before
  // it is parsed.
  absl::StatusOr<std::string> Submit(const std::function<absl::StatusOr<v1::JobSpec>()>& make_spec,
                                     int32_t priority, const std::string& owner);
  // NOT_FOUND for an unknown id.
  absl::StatusOr<v1::Job> Get(const std::string& id);
  absl::StatusOr<JobListPage> List(const JobListQuery& query);
  // Stops the job's trainers and marks it CANCELLED; a finished job is
  // returned unchanged; NOT_FOUND for an unknown id.
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  std::vector<v1::Worker> ListWorkers();

  // Returns the job once its version is above `after_version` (at once for
  // 0), or its current state with changed=false after `timeout`. A finished
  // job always counts as changed. NOT_FOUND for an unknown id.
  absl::StatusOr<JobSnapshot> WaitForJob(const std::string& id, uint64_t after_version,
                                         absl::Duration timeout);
  // Up to `limit` log lines with seq > since_seq.
  absl::StatusOr<std::vector<v1::LogLine>> ReadLogs(const std::string& id, int64_t since_seq,
                                                    int limit);
  // Waits until the job has lines past `since_seq`, finished, or `timeout`
  // passed. Returns true if the job has finished (no more lines will come).
  absl::StatusOr<bool> WaitForLogs(const std::string& id, int64_t since_seq,
                                   absl::Duration timeout);

  // ---- workers

  // INVALID_ARGUMENT for duplicate device indices. `bound_id`, when set, is
  // the id the caller's certificate binds it to: it gets that id whatever
  // the request asks for (the service refuses a request for another).
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(const v1::RegisterWorkerRequest& req,
                                                            const std::string& bound_id = "");
  // NOT_FOUND for a worker that must register (again).
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req);

  // ---- trainers
  Rendezvous* rendezvous() { return &rendezvous_; }

  // The running jobs (for the metrics and the dashboard; each spec holds its
  // name, distribution, checkpoint, restart, logging and max_run_seconds
  // only) and the job counts by state (from the store).
  std::vector<v1::Job> RunningJobs();
  // The logged steps of an unfinished job since the coordinator started
  // (at most kMaxCurvePoints, thinned evenly); empty for a finished one.
  static constexpr int kMaxCurvePoints = 1000;
  // The most epochs a job's history keeps (common::MergeEpochs thins it
  // beyond), in the record and in its result.
  static constexpr int kMaxHistoryEpochs = static_cast<int>(common::kMaxHistoryEpochs);
  std::vector<CurvePoint> Curve(const std::string& id);
  // The last `n` log lines of a job.
  absl::StatusOr<std::vector<v1::LogLine>> TailLogs(const std::string& id, int n);
  CoordinatorMetrics* metrics() const { return options_.metrics; }
  absl::StatusOr<std::map<v1::JobState, int64_t>> CountJobsByState();

  // Periodic housekeeping, called about twice a second: marks silent workers
  // lost and fails their attempts, flushes progress, schedules.
  void Tick();

 private:
  // What the coordinator tracks of one unfinished job beside the proto.
  // The spec is held once, serialized (`spec`): parsed, a spec of many
  // layers costs tens of times its serialized size. `job.spec()` holds only
  // its head (SpecHead: name, distribution, checkpoint, restart, logging,
  // max_run_seconds), what the coordinator reads; what leaves the
  // coordinator as a job (WithSpec) or a desired attempt has the whole spec.
  struct ActiveJob {
    v1::Job job;
    std::shared_ptr<const std::string> spec;  // never null once stored
    std::string spec_digest;                  // common::JobSpecDigest(whole spec)
    uint64_t version = 0;
    std::string message;
    bool dirty = false;  // in-memory changes not in the store
    absl::Time last_persist;
    int64_t last_log_seq = 0;
    std::set<std::string> reported;     // workers whose share reported RUNNING
    std::map<std::string, int> exited;  // worker -> exit code (current attempt)
    // first rank of a share -> the last collective_seq_completed its trainer
    // reported (current attempt), for hang reports (coordinator/hang_report.h)
    std::map<int, int64_t> collective_done;
    // When the last attempt failed and was retried (0: none since), for
    // yoke_recovery_seconds: cleared by the next attempt's first step.
    int64_t failed_at_ms = 0;
    JobCurve curve;  // rank 0's logged steps (Curve())
    // The first share of the current attempt that failed only as the echo
    // of a peer's failure (coordinator_internal::PeerCaused): the attempt
    // fails with it at deadline_ms, or when every share has exited,
    // unless a share's own failure comes first.
    struct Echo {
      std::string reason;
      bool retryable = true;
      int64_t deadline_ms = 0;
    };
    std::optional<Echo> echo;
    // common::RestartsReplicasAlone of the whole spec (the head lacks
    // training): a failed share of replicas only restarts alone.
    bool restarts_alone = false;
  };
  struct Draining {
    std::string kind;
    std::vector<int> devices;
    std::string owner;  // they count toward its max_running_devices_per_submitter
  };

  Coordinator(JobStore* store, const common::Clock* clock, CoordinatorOptions options);
  absl::Status Reload();
  // Fills aj.job (its spec reduced to the head), aj.spec and aj.spec_digest
  // from `job` and its whole spec `spec`, `serialized` being spec's bytes.
  static void Hold(ActiveJob& aj, v1::Job job, const v1::JobSpec& spec, std::string serialized);
  // `job` with the whole spec parsed from `spec` in place of its head.
  static v1::Job WithSpec(v1::Job job, const std::string& spec);

  // Everything below runs under mu_.
  v1::Attempt* CurrentAttempt(ActiveJob& aj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Bump(ActiveJob& aj, std::string message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Persist(ActiveJob& aj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<WorkerCapacity> Capacities(bool alive_only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FAILED_PRECONDITION when no alive worker has the memory a replica of
  // `spec` certainly needs: `est`, common::EstimateReplicaMemory's (made
  // before the lock: it walks every layer, and a hostile spec has many).
  absl::Status CheckMemory(const v1::JobSpec& spec, const common::MemoryEstimate& est) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED, naming the option, when `spec` would take `owner`
  // past a quota on PENDING jobs (CoordinatorOptions).
  absl::Status CheckQuotas(const v1::JobSpec& spec, const std::string& owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED, naming max_submits_per_minute_per_submitter, when
  // `owner` has no SubmitJob call left in its bucket; else takes one.
  absl::Status TakeSubmitToken(const std::string& owner) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submit after the token is taken.
  absl::StatusOr<std::string> SubmitAdmitted(const v1::JobSpec& spec, int32_t priority,
                                             const std::string& owner);
  // Fails every scheduled or running job that has run longer than its
  // max_run_seconds (or the coordinator's default), without a retry.
  void StopOverdueJobs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunScheduler() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `device_seconds` to `owner`'s decayed usage (usage_), or with 0
  // just decays it to now; returns the total.
  double AddUsage(const std::string& owner, double device_seconds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Applying what a worker observed of one attempt (coordinator_status.cc).
  // What one AttemptStatus changed, for ApplyStatus to persist and announce.
  struct StatusEffect {
    bool state_changed = false;  // a state or the epoch history: persist at once
    std::string message;         // for watchers (Bump); empty: nothing to announce
  };
  // Applies `st`, reported by `worker_id`, to its job: logs, collective
  // progress, rank 0's epochs and progress, the share RUNNING, the share
  // EXITED. Ignores a finished or unknown job, a stale attempt, a worker
  // without a share of it and a share that already exited. May finish the
  // job (then it is no longer in active_).
  void ApplyStatus(const std::string& worker_id, const v1::AttemptStatus& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends st's log lines (coordinator_internal::LogLinesToStore) to the
  // store and wakes log followers; a store error is logged and the lines
  // dropped.
  void StoreLogs(ActiveJob& aj, const v1::Attempt& a, const v1::Assignment& share,
                 const std::string& worker_id, const v1::AttemptStatus& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank 0's finished epochs: merged into the history (once each), the
  // last one's metrics as the message; a state change (persisted at once).
  void RecordEpochs(ActiveJob& aj, const v1::AttemptStatus& st, StatusEffect* effect)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank 0's progress: becomes the job's (flushed later: marks `aj` dirty),
  // extends the curve, ends a recovery (yoke_recovery_seconds) once the
  // attempt after a failure trained a step; message "progress" unless one
  // is set.
  void RecordProgress(ActiveJob& aj, const v1::AttemptStatus& st, StatusEffect* effect)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The share on `worker_id` reported RUNNING; once every share has, a
  // SCHEDULED job and its attempt become RUNNING (a state change).
  void MarkShareRunning(ActiveJob& aj, v1::Attempt& a, const std::string& worker_id,
                        StatusEffect* effect) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The share on `worker_id` EXITED with st.exit_code(). Non-zero fails the
  // attempt (exit code 2 without a retry) with ExitReason and the hang
  // report; 0 keeps rank 0's result and, once every share exited 0,
  // succeeds the job. Returns true when it ended the attempt: `aj` may then
  // be gone and must not be used.
  bool ApplyExit(ActiveJob& aj, v1::Attempt& a, const v1::Assignment& share,
                 const std::string& worker_id, const v1::AttemptStatus& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A share of `a` whose trainer failed with st (not as a peer's echo)
  // restarts alone, as its next incarnation in the same attempt, when the
  // job restarts replicas alone (ActiveJob::restarts_alone), the share holds
  // neither rank 0 nor a PS task, the failure is retryable and not out of
  // memory, and restart.max_restarts has one left (RestartsUsed). Returns
  // whether it did.
  bool RestartShareAlone(ActiveJob& aj, v1::Attempt& a, const v1::Assignment& share,
                         const std::string& worker_id, const v1::AttemptStatus& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ExitReason with the hang report (the blamed workers' addresses named).
  std::string FailureReason(const ActiveJob& aj, const v1::Attempt& a, const v1::Assignment& share,
                            const v1::AttemptStatus& st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the attempts whose echoed failure (ActiveJob::echo) waited past
  // its deadline for the peer's own exit.
  void FailEchoedAttempts() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Ends the current attempt of `aj` (FAILED or CANCELLED): unindexes it and
  // moves the devices of shares still running to draining.
  void EndAttempt(ActiveJob& aj, v1::AttemptState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the current attempt; retries the job if allowed, else fails it.
  void FailAttempt(ActiveJob& aj, const std::string& reason, bool retryable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks `aj` terminal, persists it and forgets it; returns the final job
  // (its spec the head only: WithSpec(job, *aj.spec) makes it whole).
  // Invalidates `aj`.
  v1::Job Finish(ActiveJob& aj, v1::JobState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unindex(ActiveJob& aj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What `worker_id` should run; `observed` is what its heartbeat listed:
  // those attempts go out without their spec (the worker has it).
  std::vector<v1::DesiredAttempt> DesiredFor(
      const std::string& worker_id,
      const google::protobuf::RepeatedPtrField<v1::AttemptStatus>& observed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseDrained(const std::string& worker_id,
                      const google::protobuf::RepeatedPtrField<v1::AttemptStatus>& observed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobStore* const store_;
  const common::Clock* const clock_;
  const CoordinatorOptions options_;
  Rendezvous rendezvous_;

  absl::Mutex mu_;
  absl::CondVar changed_;  // signalled on every job change and log append
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  WorkerRegistry registry_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, ActiveJob> active_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> pending_ ABSL_GUARDED_BY(mu_);
  // Submitter -> its SubmitJob token bucket (TakeSubmitToken); one entry per
  // submitter that ever called, names that the auth store bounds.
  struct SubmitBucket {
    double tokens = 0;
    absl::Time refilled;
  };
  absl::flat_hash_map<std::string, SubmitBucket> submit_buckets_ ABSL_GUARDED_BY(mu_);
  // Submitter -> device-seconds of its ended attempts, halved every hour
  // (UsageOf), for the scheduler's fair-share order. Not persisted: a
  // restarted coordinator starts everyone at 0.
  struct Usage {
    double device_seconds = 0;
    absl::Time as_of;
  };
  absl::flat_hash_map<std::string, Usage> usage_ ABSL_GUARDED_BY(mu_);
  // worker id -> jobs whose current attempt has a share on it
  std::map<std::string, std::set<std::string>> by_worker_ ABSL_GUARDED_BY(mu_);
  // worker id -> "job/attempt" stopped but maybe still running there
  std::map<std::string, std::map<std::string, Draining>> draining_ ABSL_GUARDED_BY(mu_);
  bool schedule_needed_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_COORDINATOR_H_
