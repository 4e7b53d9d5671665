// CoordinatorStore: the Store of one attempt, backed by the coordinator's
// Rendezvous gRPC service (proto/yoke/v1/coordinator.proto). Every key lives
// in the (job_id, attempt) namespace the coordinator opened when it scheduled
// the attempt, and vanishes when the attempt ends.
//
//   Set(key, value)      -> Rendezvous.Put
//   Get(key, timeout)    -> Rendezvous.Get with timeout_ms, and a gRPC
//                           deadline a little beyond it
//
// A coordinator that is briefly unreachable (UNAVAILABLE: restarting, not yet
// listening) is retried with exponential backoff until the call's deadline
// (Set: Options::unavailable_timeout; Get: its own timeout, at least
// Options::unavailable_timeout). Every other error is returned at once with
// its canonical code. Messages name the key and the coordinator's address.
//
// Thread-safety: thread-safe (gRPC stubs are).
#ifndef YOKE_COLLECTIVE_COORDINATOR_STORE_H_
#define YOKE_COLLECTIVE_COORDINATOR_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collective/store.h"
#include "grpcpp/channel.h"
#include "proto/yoke/v1/coordinator.grpc.pb.h"

namespace yoke::collective {

struct CoordinatorStoreOptions {
  // How long a call keeps retrying a coordinator that is UNAVAILABLE.
  absl::Duration unavailable_timeout = absl::Seconds(30);
  // First backoff between retries; doubles up to max_backoff.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // The cluster CA (PEM): the channel is TLS, and the coordinator must
  // present a certificate it signed. "": plaintext (an --insecure one).
  std::string tls_ca_pem;
  // The attempt's rendezvous secret, sent as `yoke-rendezvous-secret` with
  // every call ("": none).
  std::string secret;

  // Defaults, with tls_ca_pem read from the file $YOKE_TLS_CA and secret
  // from $YOKE_RENDEZVOUS_SECRET (what the worker daemon gives a trainer).
  static absl::StatusOr<CoordinatorStoreOptions> FromEnvironment();
};

class CoordinatorStore : public Store {
 public:
  // `target`: the coordinator's "host:port" (a TLS channel if
  // options.tls_ca_pem is set, else plaintext).
  CoordinatorStore(const std::string& target, std::string job_id, int attempt,
                   CoordinatorStoreOptions options = {});
  // `channel`: an existing channel to the coordinator at `target` (the
  // address is used only in messages).
  CoordinatorStore(std::shared_ptr<grpc::Channel> channel, std::string target, std::string job_id,
                   int attempt, CoordinatorStoreOptions options = {});

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;

 private:
  std::string Where(absl::string_view key) const;
  void AwaitConnection();

  std::string target_;
  std::string job_id_;
  int attempt_;
  CoordinatorStoreOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
};

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_COORDINATOR_STORE_H_
