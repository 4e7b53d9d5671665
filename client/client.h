// A small C++ client of the coordinator (yoke.v1.Coordinator), used by the
// `yoke` CLI and usable from any C++ program that wants to submit and follow
// jobs without writing gRPC code.
//
// Every call returns absl::Status / StatusOr carrying the server's canonical
// code and message unchanged (INVALID_ARGUMENT naming the field path,
// NOT_FOUND for an unknown job, ...). When the coordinator cannot be reached
// the status is UNAVAILABLE with a message that says where we looked and how
// to start one. Unary calls carry a short deadline (ClientOptions) so a hung
// or absent coordinator fails fast; the streaming calls (WatchJob,
// GetJobLogs) have no deadline because they last as long as the job.
//
// Address resolution (ResolveCoordinatorAddress): the --coordinator flag,
// else $YOKE_COORDINATOR, else the address `yoke up` recorded in its state
// file (local_cluster.h), else 127.0.0.1:7070.
//
// Thread-safety: a CoordinatorClient may be used from several threads at
// once (gRPC stubs are thread-safe); the callbacks of the streaming calls run
// on the calling thread.
#ifndef YOKE_CLIENT_CLIENT_H_
#define YOKE_CLIENT_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/yoke/v1/coordinator.grpc.pb.h"

namespace yoke::client {

// The address used when nothing else names one.
inline constexpr char kDefaultCoordinatorAddress[] = "127.0.0.1:7070";

// `flag` if non-empty, else $YOKE_COORDINATOR, else the address in the state
// file of a running `yoke up` cluster, else kDefaultCoordinatorAddress.
std::string ResolveCoordinatorAddress(const std::string& flag);

struct ClientOptions {
  // Deadline of each unary call. Short, because every unary RPC of the
  // coordinator is a store read or a single transaction.
  std::chrono::milliseconds unary_timeout{10000};
  // TLS (and maybe a token) from ResolveCredentials; null: plaintext, for a
  // coordinator that runs --insecure.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// Where the CLI's credentials come from (`--tls-dir`, `--token`,
// `--insecure`).
struct CredentialFlags {
  std::string tls_dir;
  std::string token;
  bool insecure = false;
};

// The channel credentials for a coordinator:
//   --insecure or YOKE_INSECURE=1: plaintext;
//   else TLS with the credentials directory (ca.crt, and tls.crt/tls.key if
//   present) named by --tls-dir, else $YOKE_TLS_DIR, else the one the
//   running `yoke up` cluster recorded (its admin's; a cluster started
//   --insecure recorded none, and is talked to in plaintext);
//   plus the bearer token of --token or $YOKE_TOKEN, if any.
// FAILED_PRECONDITION saying how to get credentials when none are found.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ResolveCredentials(
    const CredentialFlags& flags);

// Converts a finished call's status: the server's code and message are kept;
// a transport failure becomes the "cannot reach the coordinator" message.
absl::Status FromGrpcStatus(const grpc::Status& s, const std::string& address);

class CoordinatorClient {
 public:
  // Creates a channel to `address` (host:port). Does not connect yet: the
  // first call does, and fails with UNAVAILABLE if nobody listens.
  explicit CoordinatorClient(std::string address, ClientOptions options = {});

  const std::string& address() const { return address_; }

  // The new job's id. INVALID_ARGUMENT naming the field for a bad spec,
  // FAILED_PRECONDITION when no registered fleet could fit it.
  absl::StatusOr<std::string> SubmitJob(const v1::JobSpec& spec, int priority = 0);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // All jobs in `states` (all when empty), newest first; follows the pages.
  // With `summary` each spec carries only its name (ListJobsRequest.summary).
  absl::StatusOr<std::vector<v1::Job>> ListJobs(const std::vector<v1::JobState>& states = {},
                                                bool summary = false);
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id);
  absl::StatusOr<std::vector<v1::Worker>> ListWorkers();
  // Admin only.
  absl::StatusOr<v1::CreateTokenResponse> CreateToken(const std::string& role,
                                                      const std::string& name, absl::Duration ttl);
  absl::Status RevokeToken(const std::string& id);

  // Streams the job's events to `on_event` until the stream ends (after the
  // event with a terminal state: returns OK), `on_event` returns false
  // (returns OK), or the call fails (returns the error, e.g. UNAVAILABLE when
  // the coordinator went away mid-stream).
  absl::Status WatchJob(const std::string& job_id,
                        const std::function<bool(const v1::JobEvent&)>& on_event);

  // Streams log lines with seq > since_seq; with `follow`, keeps streaming
  // until the job ends. Same return rules as WatchJob.
  absl::Status GetJobLogs(const std::string& job_id, bool follow, int64_t since_seq,
                          const std::function<bool(const v1::LogLine&)>& on_line);

 private:
  void SetDeadline(grpc::ClientContext* ctx) const;

  std::string address_;
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace yoke::client

#endif  // YOKE_CLIENT_CLIENT_H_
