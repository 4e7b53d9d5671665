// AuthStore: the coordinator's secrets, in a SQLite file of their own (the
// coordinator uses "<store>.auth", mode 0600, beside its job store):
//
//   - bearer tokens for orchestration systems that cannot hold a client
//     certificate. A token is "yoke_<id>.<secret>": the id (16 hex digits) is
//     public and names it in `yoke token revoke`; the secret (64 hex digits,
//     256 random bits) is shown once, at creation, and only its SHA-256 is
//     stored. A token has a role (viewer, submitter or admin), a name (the
//     identity its jobs are owned by) and an expiry, and can be revoked.
//   - the rendezvous key: 32 random bytes drawn on first use and kept, from
//     which each attempt's rendezvous secret is derived as
//     HMAC-SHA256(key, "<job>/<attempt>") in hex. The secret travels to the
//     attempt's workers in DesiredAttempt and from the trainers back as call
//     metadata; deriving it means nothing per attempt is stored, and a
//     restarted coordinator recognises the secrets of attempts still running.
//
// Tokens are cached in memory, so checking one touches no disk.
// Thread-safe.
#ifndef YOKE_COORDINATOR_AUTH_STORE_H_
#define YOKE_COORDINATOR_AUTH_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "security/certs.h"

struct sqlite3;

namespace yoke::server {

struct TokenInfo {
  std::string id;
  common::Role role = common::Role::kViewer;
  std::string name;
  absl::Time create_time;
  absl::Time expire_time;
  bool revoked = false;
};

class AuthStore {
 public:
  // Opens (creating the tables in) the SQLite file at `path`; ":memory:"
  // keeps everything in memory.
  static absl::StatusOr<std::unique_ptr<AuthStore>> Open(const std::string& path);
  ~AuthStore();

  // Creates a token; returns "yoke_<id>.<secret>" (the only time the secret
  // exists outside the caller). Roles: viewer, submitter, admin.
  absl::StatusOr<std::string> CreateToken(common::Role role, const std::string& name,
                                          absl::Duration ttl, absl::Time now);
  // Marks the token revoked (NOT_FOUND if unknown). `id_or_token` is the id
  // or the whole token.
  absl::Status RevokeToken(const std::string& id_or_token);
  // The token's identity if it is known, unexpired at `now` and not revoked;
  // UNAUTHENTICATED saying which otherwise (never echoing the secret).
  absl::StatusOr<TokenInfo> CheckToken(const std::string& token, absl::Time now) const;
  std::vector<TokenInfo> ListTokens() const;

  // The attempt's rendezvous secret (see the header comment).
  std::string RendezvousSecret(const std::string& job_id, int attempt) const;
  // A worker id's incarnation token, HMAC-SHA256(key, "incarnation/<id>")
  // in hex: derived, so a restarted coordinator checks the tokens of the
  // workers that come back without storing any.
  std::string WorkerIncarnation(const std::string& worker_id) const;
  // The next worker number (1, 2, ...), kept in the file, so a restarted
  // coordinator never hands out an id that a live daemon still holds.
  absl::StatusOr<int64_t> NextWorkerNumber();

 private:
  explicit AuthStore(sqlite3* db) : db_(db) {}
  absl::Status Init();
  absl::Status Exec(const char* sql);
  std::string Mac(const std::string& msg) const;  // HMAC-SHA256 with the key, hex

  mutable absl::Mutex mu_;
  sqlite3* db_;
  std::string rendezvous_key_;
  std::map<std::string, TokenInfo> tokens_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> hashes_ ABSL_GUARDED_BY(mu_);  // id -> SHA-256(secret)
};

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_AUTH_STORE_H_
