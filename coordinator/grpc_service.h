// The coordinator's gRPC surface: three thin services that convert proto
// requests into calls on the plain Coordinator and its Status into a
// grpc::Status with the same canonical code and message, plus
// CoordinatorServer, which serves them (with gRPC health checking and server
// reflection) and drives Coordinator::Tick().
//
// Streams: WatchJob sends the job as it is, then one event per change
// (changes that happen faster than the client reads coalesce into the
// latest state) and ends after the event that carries a terminal state.
// GetJobLogs sends the stored lines past since_seq; with follow it keeps
// sending new lines until the job has finished and its last line went out.
// Both poll for client cancellation and server shutdown every 250 ms, so a
// departed client never pins a thread for long.
//
// Every handler first asks the Authenticator (coordinator/auth.h) who is calling
// and checks the caller's role for the method: UNAUTHENTICATED or
// PERMISSION_DENIED before any work. Workers act only as the id that is
// their certificate's name; submitters cancel only jobs they own.
//
// Malformed requests never reach this code: gRPC's parser refuses bytes that
// are not a valid message (INTERNAL), and the handlers validate every field
// they use (INVALID_ARGUMENT naming it).
//
// Thread-safety: the services are called concurrently by gRPC's thread pool;
// they hold no state of their own besides the Coordinator, which is safe.
#ifndef YOKE_COORDINATOR_GRPC_SERVICE_H_
#define YOKE_COORDINATOR_GRPC_SERVICE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/auth.h"
#include "coordinator/auth_store.h"
#include "coordinator/coordinator.h"
#include "grpcpp/grpcpp.h"
#include "proto/yoke/v1/coordinator.grpc.pb.h"

namespace yoke::server {

// The most YAML text a SubmitJobRequest may carry. yaml-cpp's tree costs
// about a hundred times the text (a 1 MB job file: 115 MB and 2.5 s), and
// any submitter may send it, so this is well under kMaxSubmitSpecBytes; a
// hand-written job file is a few KiB.
inline constexpr size_t kMaxSubmitYamlBytes = 256 << 10;

// A SubmitJobRequest's spec_yaml and overrides as a JobSpec, parsed as the CLI
// parses a job file (not validated: Coordinator::Submit does that).
absl::StatusOr<v1::JobSpec> SpecFromYaml(const v1::SubmitJobRequest& req);

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // `tokens` may be null (an --insecure coordinator has no tokens).
  CoordinatorService(Coordinator* c, const Authenticator* auth, AuthStore* tokens)
      : c_(c), auth_(auth), tokens_(tokens) {}
  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status GetJobLogs(grpc::ServerContext* ctx, const v1::GetJobLogsRequest* req,
                          grpc::ServerWriter<v1::LogLine>* writer) override;
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override;
  grpc::Status CreateToken(grpc::ServerContext* ctx, const v1::CreateTokenRequest* req,
                           v1::CreateTokenResponse* resp) override;
  grpc::Status RevokeToken(grpc::ServerContext* ctx, const v1::RevokeTokenRequest* req,
                           v1::RevokeTokenResponse* resp) override;
  grpc::Status GetVersion(grpc::ServerContext* ctx, const v1::GetVersionRequest* req,
                          v1::GetVersionResponse* resp) override;

  // Ends open streams (UNAVAILABLE) within one poll interval; for shutdown.
  void StopStreams() { stopping_ = true; }

 private:
  // True when the stream should end now: client gone or shutting down.
  bool Done(grpc::ServerContext* ctx) const { return stopping_ || ctx->IsCancelled(); }

  Coordinator* c_;
  const Authenticator* auth_;
  AuthStore* tokens_;
  std::atomic<bool> stopping_{false};
};

class WorkerControlService final : public v1::WorkerControl::Service {
 public:
  WorkerControlService(Coordinator* c, const Authenticator* auth) : c_(c), auth_(auth) {}
  grpc::Status RegisterWorker(grpc::ServerContext* ctx, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;

 private:
  Coordinator* c_;
  const Authenticator* auth_;
};

class RendezvousService final : public v1::Rendezvous::Service {
 public:
  RendezvousService(Coordinator* c, const Authenticator* auth) : c_(c), auth_(auth) {}
  grpc::Status Put(grpc::ServerContext* ctx, const v1::KvPutRequest* req,
                   v1::KvPutResponse* resp) override;
  // timeout_ms is capped at 10 minutes.
  grpc::Status Get(grpc::ServerContext* ctx, const v1::KvGetRequest* req,
                   v1::KvGetResponse* resp) override;

  void StopWaits() { stopping_ = true; }

 private:
  Coordinator* c_;
  const Authenticator* auth_;
  std::atomic<bool> stopping_{false};
};

struct ServerOptions {
  // host:port; port 0 picks a free one (see CoordinatorServer::address()).
  std::string listen = "127.0.0.1:7070";
  // How often Coordinator::Tick() runs.
  absl::Duration tick_interval = absl::Milliseconds(500);
  // Shutdown() lets calls in flight finish for this long, then cancels them.
  absl::Duration shutdown_grace = absl::Seconds(2);
  // TLS: the coordinator's credentials (ca.crt, tls.crt, tls.key). Unset:
  // plaintext, every caller an anonymous admin (--insecure; development
  // only, logged as a warning).
  std::optional<common::Credentials> tls;
  // Tokens and rendezvous secrets; required with `tls`, must outlive the
  // server.
  AuthStore* auth_store = nullptr;
};

class CoordinatorServer {
 public:
  // Serves `coordinator` (which must outlive the server). UNAVAILABLE if
  // the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(Coordinator* coordinator,
                                                                  const ServerOptions& options);
  // Shuts down if still serving.
  ~CoordinatorServer();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // Stops accepting calls, ends streams, waits for handlers, stops ticking.
  // Safe to call more than once and from any thread but a handler's.
  void Shutdown();
  // Blocks until Shutdown() has finished.
  void Wait();

 private:
  CoordinatorServer(Coordinator* c, const ServerOptions& options,
                    std::unique_ptr<Authenticator> auth);

  Coordinator* coordinator_;
  ServerOptions options_;
  std::unique_ptr<Authenticator> auth_;
  CoordinatorService coordinator_service_;
  WorkerControlService worker_service_;
  RendezvousService rendezvous_service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
  absl::Notification stop_ticking_;
  std::thread ticker_;
  std::atomic<bool> shut_down_{false};
  absl::Notification done_;
};

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_GRPC_SERVICE_H_
