#include "coordinator/auth_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "coordinator/private_file.h"
#include "openssl/crypto.h"
#include "openssl/hmac.h"
#include "openssl/rand.h"
#include "security/sha256.h"

namespace yoke::server {
namespace {

constexpr absl::string_view kTokenPrefix = "yoke_";
constexpr size_t kIdBytes = 8;
constexpr size_t kSecretBytes = 32;

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    return absl::InternalError("drawing random bytes failed");
  }
  return out;
}

// Splits "yoke_<id>.<secret>" (or a bare id); false if it is neither.
bool SplitToken(const std::string& token, std::string* id, std::string* secret) {
  if (!absl::StartsWith(token, kTokenPrefix)) return false;
  const absl::string_view rest = absl::string_view(token).substr(kTokenPrefix.size());
  const size_t dot = rest.find('.');
  *id = std::string(rest.substr(0, dot));
  *secret = dot == absl::string_view::npos ? "" : std::string(rest.substr(dot + 1));
  return id->size() == 2 * kIdBytes;
}

int64_t Ms(absl::Time t) { return absl::ToUnixMillis(t); }

}  // namespace

absl::StatusOr<std::unique_ptr<AuthStore>> AuthStore::Open(const std::string& path) {
  // Token hashes and the rendezvous key: for the coordinator's user only.
  if (absl::Status s = MakePrivate(path); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("auth store ", s.message()));
  }
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("auth store '", path, "': cannot open: ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<AuthStore> store(new AuthStore(db));
  if (auto s = store->Init(); !s.ok()) return s;
  return store;
}

AuthStore::~AuthStore() { sqlite3_close(db_); }

absl::Status AuthStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::UnavailableError(absl::StrCat("auth store: ", msg));
  }
  return absl::OkStatus();
}

absl::Status AuthStore::Init() {
  if (auto s =
          Exec("CREATE TABLE IF NOT EXISTS auth_meta (key TEXT PRIMARY KEY, value BLOB);"
               "CREATE TABLE IF NOT EXISTS auth_tokens (id TEXT PRIMARY KEY, hash BLOB NOT NULL,"
               " role TEXT NOT NULL, name TEXT NOT NULL, create_ms INTEGER NOT NULL,"
               " expire_ms INTEGER NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);");
      !s.ok()) {
    return s;
  }
  // The rendezvous key: read, or drawn and kept (INSERT OR IGNORE: a second
  // coordinator racing on the same file keeps the first one's).
  auto fresh = RandomBytes(kSecretBytes);
  if (!fresh.ok()) return fresh.status();
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_,
                     "INSERT OR IGNORE INTO auth_meta (key, value) VALUES ('rendezvous_key', ?)",
                     -1, &st, nullptr);
  sqlite3_bind_blob(st, 1, fresh->data(), static_cast<int>(fresh->size()), SQLITE_STATIC);
  const int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return absl::UnavailableError(absl::StrCat("auth store: ", sqlite3_errmsg(db_)));
  sqlite3_prepare_v2(db_, "SELECT value FROM auth_meta WHERE key = 'rendezvous_key'", -1, &st,
                     nullptr);
  if (sqlite3_step(st) == SQLITE_ROW) {
    rendezvous_key_.assign(static_cast<const char*>(sqlite3_column_blob(st, 0)),
                           sqlite3_column_bytes(st, 0));
  }
  sqlite3_finalize(st);
  if (rendezvous_key_.size() != kSecretBytes) {
    return absl::DataLossError("auth store: the rendezvous key is missing or damaged");
  }
  absl::MutexLock lock(&mu_);
  sqlite3_prepare_v2(db_,
                     "SELECT id, hash, role, name, create_ms, expire_ms, revoked FROM auth_tokens",
                     -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    TokenInfo t;
    t.id = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    auto role = common::ParseRole(reinterpret_cast<const char*>(sqlite3_column_text(st, 2)));
    if (!role.ok()) continue;  // a row this version does not understand grants nothing
    t.role = *role;
    t.name = reinterpret_cast<const char*>(sqlite3_column_text(st, 3));
    t.create_time = absl::FromUnixMillis(sqlite3_column_int64(st, 4));
    t.expire_time = absl::FromUnixMillis(sqlite3_column_int64(st, 5));
    t.revoked = sqlite3_column_int(st, 6) != 0;
    hashes_[t.id].assign(static_cast<const char*>(sqlite3_column_blob(st, 1)),
                         sqlite3_column_bytes(st, 1));
    tokens_[t.id] = std::move(t);
  }
  sqlite3_finalize(st);
  return absl::OkStatus();
}

absl::StatusOr<std::string> AuthStore::CreateToken(common::Role role, const std::string& name,
                                                   absl::Duration ttl, absl::Time now) {
  if (role != common::Role::kViewer && role != common::Role::kSubmitter &&
      role != common::Role::kAdmin) {
    return absl::InvalidArgumentError(absl::StrCat(
        "role: tokens are for viewer, submitter or admin, not ", common::RoleName(role)));
  }
  if (auto s = common::ValidateCertName(name); !s.ok()) return s;
  if (ttl <= absl::ZeroDuration() || ttl > absl::Hours(24 * 366)) {
    return absl::InvalidArgumentError("ttl: must be > 0 and at most 366 days");
  }
  auto id_bytes = RandomBytes(kIdBytes);
  auto secret_bytes = RandomBytes(kSecretBytes);
  if (!id_bytes.ok()) return id_bytes.status();
  if (!secret_bytes.ok()) return secret_bytes.status();
  TokenInfo t;
  t.id = absl::BytesToHexString(*id_bytes);
  const std::string secret = absl::BytesToHexString(*secret_bytes);
  const std::string hash = common::Sha256(secret);
  t.role = role;
  t.name = name;
  t.create_time = now;
  t.expire_time = now + ttl;
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_,
                     "INSERT INTO auth_tokens (id, hash, role, name, create_ms, expire_ms) "
                     "VALUES (?, ?, ?, ?, ?, ?)",
                     -1, &st, nullptr);
  const std::string role_name(common::RoleName(role));
  sqlite3_bind_text(st, 1, t.id.data(), static_cast<int>(t.id.size()), SQLITE_STATIC);
  sqlite3_bind_blob(st, 2, hash.data(), static_cast<int>(hash.size()), SQLITE_STATIC);
  sqlite3_bind_text(st, 3, role_name.data(), static_cast<int>(role_name.size()), SQLITE_STATIC);
  sqlite3_bind_text(st, 4, name.data(), static_cast<int>(name.size()), SQLITE_STATIC);
  sqlite3_bind_int64(st, 5, Ms(t.create_time));
  sqlite3_bind_int64(st, 6, Ms(t.expire_time));
  const int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return absl::UnavailableError(absl::StrCat("auth store: ", sqlite3_errmsg(db_)));
  hashes_[t.id] = hash;
  const std::string token = absl::StrCat(kTokenPrefix, t.id, ".", secret);
  tokens_[t.id] = std::move(t);
  return token;
}

absl::Status AuthStore::RevokeToken(const std::string& id_or_token) {
  std::string id = id_or_token, secret;
  if (absl::StartsWith(id_or_token, kTokenPrefix)) SplitToken(id_or_token, &id, &secret);
  absl::MutexLock lock(&mu_);
  auto it = tokens_.find(id);
  if (it == tokens_.end()) {
    return absl::NotFoundError(absl::StrCat("token ", common::Quote(id, 32), " not found"));
  }
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_, "UPDATE auth_tokens SET revoked = 1 WHERE id = ?", -1, &st, nullptr);
  sqlite3_bind_text(st, 1, id.data(), static_cast<int>(id.size()), SQLITE_STATIC);
  const int rc = sqlite3_step(st);
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE)
    return absl::UnavailableError(absl::StrCat("auth store: ", sqlite3_errmsg(db_)));
  it->second.revoked = true;
  return absl::OkStatus();
}

absl::StatusOr<TokenInfo> AuthStore::CheckToken(const std::string& token, absl::Time now) const {
  std::string id, secret;
  if (!SplitToken(token, &id, &secret) || secret.empty()) {
    return absl::UnauthenticatedError("bearer token: not a yoke token (yoke_<id>.<secret>)");
  }
  const std::string hash = common::Sha256(secret);
  absl::MutexLock lock(&mu_);
  auto it = tokens_.find(id);
  auto h = hashes_.find(id);
  if (it == tokens_.end() || h == hashes_.end() || h->second.size() != hash.size() ||
      CRYPTO_memcmp(h->second.data(), hash.data(), hash.size()) != 0) {
    return absl::UnauthenticatedError(
        absl::StrCat("bearer token ", id, ": unknown or wrong secret"));
  }
  if (it->second.revoked) {
    return absl::UnauthenticatedError(absl::StrCat("bearer token ", id, ": revoked"));
  }
  if (now >= it->second.expire_time) {
    return absl::UnauthenticatedError(absl::StrCat(
        "bearer token ", id, ": expired at ",
        absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", it->second.expire_time, absl::UTCTimeZone())));
  }
  return it->second;
}

std::vector<TokenInfo> AuthStore::ListTokens() const {
  absl::MutexLock lock(&mu_);
  std::vector<TokenInfo> out;
  for (const auto& [id, t] : tokens_) out.push_back(t);
  return out;
}

std::string AuthStore::RendezvousSecret(const std::string& job_id, int attempt) const {
  return Mac(absl::StrCat(job_id, "/", attempt));
}

std::string AuthStore::WorkerIncarnation(const std::string& worker_id) const {
  return Mac(absl::StrCat("incarnation/", worker_id));
}

absl::StatusOr<int64_t> AuthStore::NextWorkerNumber() {
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db_,
                     "INSERT INTO auth_meta (key, value) VALUES ('next_worker_number', 1) "
                     "ON CONFLICT(key) DO UPDATE SET value = value + 1 RETURNING value",
                     -1, &st, nullptr);
  int64_t n = -1;
  if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  if (n < 1) return absl::UnavailableError(absl::StrCat("auth store: ", sqlite3_errmsg(db_)));
  return n;
}

std::string AuthStore::Mac(const std::string& msg) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), rendezvous_key_.data(), static_cast<int>(rendezvous_key_.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(mac), len));
}

}  // namespace yoke::server
