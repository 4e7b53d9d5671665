// WorkerDaemon: the worker side of the coordinator <-> worker protocol
// (proto/yoke/v1/coordinator.proto, docs/protocol.md).
//
//   1. Register: RegisterWorker with the hostname, the devices, the worker
//      id it had ("" the first time) and every attempt it knows (non-empty
//      after a coordinator restart): running ones, and exited ones the
//      coordinator has not recorded yet (phase EXITED, as in a heartbeat),
//      so an attempt that finished while the coordinator was down is not
//      mistaken for a lost trainer. The reply names the id and the
//      heartbeat interval.
//   2. Every interval, Heartbeat with one AttemptStatus per attempt it knows:
//      phase, latest progress, pid, and what the coordinator has not yet
//      acknowledged: epochs finished and log lines since the last heartbeat
//      that succeeded (a failed heartbeat's share is sent again; at most
//      max_log_lines/bytes_per_heartbeat each). Once the trainer has exited
//      and its last lines go out: phase EXITED with the exit code and reason
//      (and the result after a clean exit), repeated on every heartbeat
//      until the coordinator stops listing the attempt. Nothing new follows
//      an EXITED status, so the coordinator may treat it as final.
//   3. Reconcile to the reply's desired list: start each listed attempt it
//      does not know (a `yoke-trainer --spec-file job.pb --output events
//      --rank R --world-size N` child in work_dir/<job>/attempt-<n>/, where
//      job.pb is the spec as sent, serialized; in a world of more than one
//      rank also `--replicas K --coordinator ADDR --job-id ID --attempt A`,
//      from which the trainer reaches the attempt's rendezvous, and
//      `--gloo-hostname ADVERTISED --rank-hosts W@ADDR,...`: the address its
//      Gloo listeners bind to and who runs every rank, for its messages), stop
//      (SIGTERM, SIGKILL after the grace) running attempts no longer listed,
//      and forget exited attempts once a heartbeat reporting their exit was
//      answered without them. An attempt it knows is never started twice,
//      even while listed after its exit. The reply carries an attempt's spec
//      only until a heartbeat lists the attempt; a listed attempt it does
//      not know and that comes without its spec is not started but reported
//      as failed to start (exit 127), like any attempt it cannot start. A
//      known attempt listed with another spec_digest than the one it was
//      started with is logged as an error and keeps running.
//   4. Coordinator unreachable (any RPC error but NOT_FOUND): trainers keep
//      running; retry with exponential backoff (initial_backoff doubling up
//      to max_backoff), logging once per outage and once on recovery.
//      NOT_FOUND on a heartbeat (the coordinator restarted and lost the
//      registration): register again with the same id, listing the running
//      attempts, which keep running.
//   5. Shutdown(): stop every trainer (with the grace), keep heartbeating
//      (with `draining` set, so nothing new is scheduled here) until they
//      have exited, send a last heartbeat with their exits, and return from
//      Run().
//
// The gRPC stub sits behind CoordinatorClient, so the reconcile logic is
// tested against an in-memory fake; the trainers are real child processes.
//
// Thread-safety: Tick() and Run() must be called from one thread (the one
// that owns the trainer children: they are killed if it exits). Shutdown()
// and worker_id() may be called from any thread.
#ifndef YOKE_WORKER_DAEMON_H_
#define YOKE_WORKER_DAEMON_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/security/credentials.h"
#include "proto/yoke/v1/coordinator.pb.h"
#include "worker/trainer_launcher.h"

namespace yoke::worker {

// The two worker-facing RPCs of the coordinator's WorkerControl service.
// Errors carry the canonical code (NOT_FOUND, UNAVAILABLE, ...).
class CoordinatorClient {
 public:
  virtual ~CoordinatorClient() = default;
  virtual absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) = 0;
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) = 0;
};

// A CoordinatorClient over a gRPC channel to `address` (host:port); each RPC
// fails with DEADLINE_EXCEEDED after `rpc_timeout`. The channel reconnects
// within ~2 s of the coordinator coming back, not gRPC's default minutes.
// `credentials`: TLS (security/tls_credentials.h) or insecure.
std::unique_ptr<CoordinatorClient> NewGrpcCoordinatorClient(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
    absl::Duration rpc_timeout = absl::Seconds(5));

class WorkerMetrics;

struct WorkerDaemonOptions {
  // Reported at registration.
  std::string hostname;
  // The address this machine's trainers listen on for their peers
  // (worker/address.h): reported at registration and handed to the trainers
  // of multi-rank attempts (`--gloo-hostname`). Empty: 127.0.0.1.
  std::string advertise_address;
  std::vector<v1::Device> devices;
  // The coordinator's host:port: for log messages, and handed to the
  // trainers of multi-rank attempts for their rendezvous.
  std::string coordinator_address;
  // Attempts run in work_dir/<job_id>/attempt-<n>/ (created as needed).
  std::string work_dir;
  // The trainer binary and extra arguments appended to every run.
  std::string trainer_path;
  std::vector<std::string> trainer_args;
  // Until the coordinator's registration reply says otherwise.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // Gets every trainer's progress reports (worker/worker_metrics.h); must
  // outlive the daemon. Unset: none.
  WorkerMetrics* metrics = nullptr;
  // Each trainer runs in a memory cgroup made here, limited to
  // replica_memory_bytes times the ranks it runs (worker/memory_cgroup.h).
  // Null (or a share of 0): trainers run without one. Must outlive the
  // daemon.
  MemoryCgroups* memory_cgroups = nullptr;
  int64_t replica_memory_bytes = 0;
  // SIGTERM -> SIGKILL grace when stopping a trainer.
  absl::Duration stop_grace = absl::Seconds(10);
  // Retry delays while the coordinator is unreachable.
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(3);
  // Log lines (and their bytes) per attempt per heartbeat; the rest follow
  // on the next ones.
  size_t max_log_lines_per_heartbeat = 1000;
  size_t max_log_bytes_per_heartbeat = 512 * 1024;
  // Log lines each trainer keeps in memory until acknowledged.
  size_t max_log_lines_buffered = 10000;
  // The cluster CA (ca.crt) trainers verify the coordinator with, handed to
  // them as YOKE_TLS_CA with their attempt's YOKE_RENDEZVOUS_SECRET; empty:
  // the coordinator runs --insecure.
  std::string tls_ca_path;
};

class WorkerDaemon {
 public:
  // `client` is not owned and must outlive the daemon.
  WorkerDaemon(WorkerDaemonOptions options, CoordinatorClient* client);
  // Kills (SIGKILL) trainers still running; Run() stops them gracefully.
  ~WorkerDaemon();

  // One round: registers if needed, then heartbeats and reconciles to the
  // reply. Returns the RPC's error if the coordinator could not be reached
  // (nothing else changes then), OK otherwise.
  absl::Status Tick();

  // Ticks every heartbeat interval (after an error: after the backoff)
  // until Shutdown(), then shuts down as step 5 above says. Returns OK.
  absl::Status Run();

  // Makes Run() shut down gracefully. Safe from any thread (not from a
  // signal handler: use a signal-waiting thread).
  void Shutdown();

  // "" until the first registration succeeded.
  std::string worker_id() const;

  // Called (on the Run()/Tick() thread) after each successful registration
  // with the worker id and whether it is the first one.
  std::function<void(const std::string& worker_id, bool first)> on_registered;

  // The statuses the next heartbeat would carry (does not mark anything as
  // sent). For tests and introspection.
  std::vector<v1::AttemptStatus> ObservedAttempts();

 private:
  struct Attempt;

  absl::Status Register();
  void Reconcile(const v1::HeartbeatResponse& response);
  void StartAttempt(const v1::DesiredAttempt& desired);
  // Starts `a`'s trainer again as `incarnation`, after its last exited (a
  // share restarted alone: DesiredAttempt.incarnation).
  void Relaunch(Attempt* a, int incarnation);
  // Prepares and starts `a`'s trainer (a->proc), or records why it cannot.
  void Launch(Attempt* a);
  // Logs (once per attempt) a coordinator that lists `a` with another
  // spec_digest than the one it was started with.
  void CheckSameSpec(Attempt* a, const v1::DesiredAttempt& d);
  absl::Status PrepareAttempt(Attempt* a, TrainerLauncherOptions* opts);
  // Fills `out` for attempt `a`; with `for_heartbeat` adds the output not
  // yet acknowledged and records what was sent, for MarkSentAsAcked() once
  // the RPC succeeded.
  void FillStatus(Attempt* a, bool for_heartbeat, v1::AttemptStatus* out);
  void MarkSentAsAcked();
  bool AnyRunning() const;
  void StopAll(const std::string& why);
  void NoteRpc(const absl::Status& s);
  // Waits up to `d`; returns early (true) if Shutdown() was called.
  bool SleepUnlessShutdown(absl::Duration d);

  WorkerDaemonOptions options_;
  CoordinatorClient* client_;
  absl::Duration interval_;
  absl::Duration backoff_;
  bool outage_ = false;
  absl::Time outage_start_;
  bool registered_ = false;
  bool registered_once_ = false;
  std::string incarnation_;  // proves worker_id_ is ours when registering again
  bool draining_ = false;
  // Keyed "job_id/attempt".
  std::map<std::string, std::unique_ptr<Attempt>> attempts_;

  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace yoke::worker

#endif  // YOKE_WORKER_DAEMON_H_
