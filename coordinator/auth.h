// Who is calling the coordinator, and what they may do.
//
// Identity comes from, in order:
//   1. a bearer token in the `authorization` metadata ("Bearer yoke_..."),
//      checked against the AuthStore (only ever over TLS: the coordinator
//      serves no plaintext port unless started --insecure);
//   2. the client certificate of the TLS connection, verified here against
//      the cluster CA (chain and validity at the time of the call). The TLS
//      layer requests a certificate without judging it, so that a missing,
//      foreign or expired one gets UNAUTHENTICATED with the reason instead of
//      a failed handshake; the handshake itself still proves the client
//      holds the certificate's key.
// With --insecure every caller is an anonymous admin.
//
// Roles per method (Allow()):
//   viewer     GetJob, ListJobs, WatchJob, GetJobLogs, ListWorkers, GetVersion
//   submitter  a viewer's, plus SubmitJob and CancelJob of its own jobs
//   admin      everything
//   worker     RegisterWorker and Heartbeat, as the worker id that is its
//              certificate's name, and nothing else
// Rendezvous calls carry the attempt's secret (metadata
// `yoke-rendezvous-secret`, see AuthStore) and are allowed in that attempt's
// namespace only; an admin may use any namespace.
//
// Verified certificates are cached by their PEM (at most 4096, then the
// cache starts over), so a heartbeat costs a map lookup, not a signature
// check. Thread-safe.
#ifndef YOKE_COORDINATOR_AUTH_H_
#define YOKE_COORDINATOR_AUTH_H_

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/auth_store.h"
#include "grpcpp/grpcpp.h"
#include "security/certs.h"

namespace yoke::server {

inline constexpr char kRendezvousSecretHeader[] = "yoke-rendezvous-secret";

struct Caller {
  common::Role role = common::Role::kAdmin;
  std::string name;     // the certificate's CN or the token's name; "" if insecure
  bool secure = false;  // false: the coordinator runs --insecure
  std::string via;      // "certificate", "token" or "insecure"
};

class Authenticator {
 public:
  // Secure: `ca_pem` is the cluster CA; `store` (which must outlive this)
  // checks tokens.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Secure(absl::string_view ca_pem,
                                                               const AuthStore* store);
  // Every caller is an anonymous admin.
  static std::unique_ptr<Authenticator> Insecure();

  bool insecure() const { return !verifier_.has_value(); }

  // UNAUTHENTICATED naming what was missing or wrong.
  absl::StatusOr<Caller> Identify(const grpc::ServerContext& ctx) const;

  // OK if the call carries (job_id, attempt)'s rendezvous secret, or its
  // caller is an admin; PERMISSION_DENIED / UNAUTHENTICATED otherwise.
  absl::Status CheckRendezvous(const grpc::ServerContext& ctx, const std::string& job_id,
                               int attempt) const;

 private:
  Authenticator() = default;
  absl::StatusOr<common::CertIdentity> VerifyCert(const std::string& pem) const;

  std::optional<common::CertVerifier> verifier_;
  const AuthStore* store_ = nullptr;
  mutable absl::Mutex mu_;
  mutable absl::flat_hash_map<std::string, common::CertIdentity> cache_ ABSL_GUARDED_BY(mu_);
};

// OK if `caller`'s role is one of `roles` (admins always pass);
// PERMISSION_DENIED naming the method, the caller and its role otherwise.
absl::Status Allow(const Caller& caller, std::initializer_list<common::Role> roles,
                   absl::string_view method);

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_AUTH_H_
