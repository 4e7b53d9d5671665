// Cluster certificates: a CA, the certificates it issues, and verification of
// a peer's certificate against it, all with OpenSSL's C API (no shelling out).
//
// Every certificate the CA issues names one identity:
//   CN  the name ("coordinator", "w-1", "alice"): a worker's id, a user's name;
//   OU  the role ("coordinator", "worker", "admin", "submitter", "viewer");
//   O   "yoke".
// Names are 1 to 64 characters of [A-Za-z0-9._-]; they appear in tables and
// in worker ids, so nothing else is allowed in them. A worker certificate
// may instead name a pool, "PREFIX-*": every worker holding it registers as
// "PREFIX-<its hostname>" (one certificate for a Kubernetes DaemonSet, whose
// pods' hostnames are their unique names). Workers of one pool can claim
// each other's ids; no other certificate can.
//
// Keys are ECDSA P-256; certificates are X.509 v3 signed with SHA-256. The
// CA is marked CA:TRUE with keyCertSign; issued certificates are CA:FALSE
// with serverAuth and clientAuth, and carry their hosts (DNS names and IP
// addresses) in the subjectAltName so that the coordinator's certificate
// matches the addresses clients dial.
//
// A credentials directory holds ca.crt, tls.crt and tls.key (the names a
// Kubernetes TLS secret uses); a CA directory holds ca.crt and ca.key. Keys
// are written with mode 0600, certificates 0644.
#ifndef YOKE_SECURITY_CERTS_H_
#define YOKE_SECURITY_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace yoke::common {

enum class Role { kViewer, kSubmitter, kAdmin, kWorker, kCoordinator };

absl::string_view RoleName(Role role);
// INVALID_ARGUMENT naming the accepted roles.
absl::StatusOr<Role> ParseRole(absl::string_view name);
// OK if `name` may name a certificate (see the header comment); a pool name
// is accepted only with `allow_pool`.
absl::Status ValidateCertName(absl::string_view name, bool allow_pool = false);

// The worker id a worker certificate named `cert_name` registers as from a
// machine called `hostname`: the name itself, or for a pool "PREFIX-*",
// "PREFIX-<hostname>" (INVALID_ARGUMENT if the hostname cannot be part of
// an id).
absl::StatusOr<std::string> WorkerIdFor(absl::string_view cert_name, absl::string_view hostname);

struct KeyCert {
  std::string cert_pem;
  std::string key_pem;  // PKCS#8, unencrypted
};

// A self-signed cluster CA, valid from a minute ago for `validity`.
absl::StatusOr<KeyCert> CreateCa(absl::string_view cluster_name, absl::Duration validity);

struct IssueOptions {
  Role role = Role::kViewer;
  std::string name;
  // DNS names and IP addresses (v4 or v6) for the subjectAltName.
  std::vector<std::string> hosts;
  absl::Time not_before = absl::InfinitePast();  // InfinitePast: a minute ago
  absl::Duration validity = absl::Hours(24 * 365);
};

// A certificate for `options` signed by `ca`.
absl::StatusOr<KeyCert> IssueCert(const KeyCert& ca, const IssueOptions& options);

// Who a verified certificate names.
struct CertIdentity {
  Role role = Role::kViewer;
  std::string name;
  absl::Time not_after;
};

// Verifies peers' certificates against one CA. Thread-safe after Create.
class CertVerifier {
 public:
  // INVALID_ARGUMENT if `ca_pem` holds no certificate.
  static absl::StatusOr<CertVerifier> Create(absl::string_view ca_pem);
  CertVerifier(CertVerifier&&) noexcept;
  CertVerifier& operator=(CertVerifier&&) noexcept;
  ~CertVerifier();

  // The identity of `cert_pem` if the CA signed it and it is valid at `now`;
  // UNAUTHENTICATED saying why not (expired, not yet valid, another CA, no
  // role) otherwise.
  absl::StatusOr<CertIdentity> Verify(absl::string_view cert_pem, absl::Time now) const;

 private:
  CertVerifier() = default;
  struct Impl;
  Impl* impl_ = nullptr;
};

// What a daemon or client presents and trusts.
struct Credentials {
  std::string ca_pem;  // the cluster CA: the only issuer trusted
  KeyCert leaf;        // its own certificate and key; empty if only ca.crt
};
// Reads a credentials directory. ca.crt is required; tls.crt and tls.key are
// required when `need_leaf`, else read if both exist. NOT_FOUND naming the
// missing file; a key readable by others than its owner is refused.
absl::StatusOr<Credentials> ReadCredentialsDir(const std::string& dir, bool need_leaf);

// Issues a certificate for `options` and writes it as a credentials
// directory (WriteCredentialsDir).
absl::Status IssueCredentialsDir(const KeyCert& ca, const IssueOptions& options,
                                 const std::string& dir);

// Reads a CA directory (ca.crt, ca.key).
absl::StatusOr<KeyCert> ReadCaDir(const std::string& dir);
// Writes ca.crt and ca.key into `dir` (created 0700 if missing). Refuses to
// overwrite an existing ca.key (ALREADY_EXISTS).
absl::Status WriteCaDir(const std::string& dir, const KeyCert& ca);
// Writes a credentials directory: ca.crt, tls.crt, tls.key.
absl::Status WriteCredentialsDir(const std::string& dir, absl::string_view ca_cert_pem,
                                 const KeyCert& leaf);

}  // namespace yoke::common

#endif  // YOKE_SECURITY_CERTS_H_
