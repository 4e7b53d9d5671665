#include "coordinator/auth.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "openssl/crypto.h"

namespace yoke::server {
namespace {

constexpr size_t kMaxCachedCerts = 4096;

// The first value of metadata `key`, if present.
std::optional<std::string> Metadata(const grpc::ServerContext& ctx, const char* key) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Secure(absl::string_view ca_pem,
                                                                     const AuthStore* store) {
  auto v = common::CertVerifier::Create(ca_pem);
  if (!v.ok()) return v.status();
  std::unique_ptr<Authenticator> a(new Authenticator());
  a->verifier_.emplace(std::move(*v));
  a->store_ = store;
  return a;
}

std::unique_ptr<Authenticator> Authenticator::Insecure() {
  return std::unique_ptr<Authenticator>(new Authenticator());
}

absl::StatusOr<common::CertIdentity> Authenticator::VerifyCert(const std::string& pem) const {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(pem);
    if (it != cache_.end() && now < it->second.not_after) return it->second;
  }
  auto id = verifier_->Verify(pem, now);
  if (!id.ok()) return id.status();
  absl::MutexLock lock(&mu_);
  if (cache_.size() >= kMaxCachedCerts) cache_.clear();
  cache_[pem] = *id;
  return *id;
}

absl::StatusOr<Caller> Authenticator::Identify(const grpc::ServerContext& ctx) const {
  Caller c;
  if (insecure()) {
    c.via = "insecure";
    return c;
  }
  c.secure = true;
  if (auto auth = Metadata(ctx, "authorization")) {
    constexpr absl::string_view kBearer = "Bearer ";
    if (!absl::StartsWith(*auth, kBearer) || store_ == nullptr) {
      return absl::UnauthenticatedError("authorization: expected 'Bearer yoke_<id>.<secret>'");
    }
    auto t = store_->CheckToken(auth->substr(kBearer.size()), absl::Now());
    if (!t.ok()) return t.status();
    c.role = t->role;
    c.name = t->name;
    c.via = "token";
    return c;
  }
  auto auth_ctx = ctx.auth_context();
  std::vector<grpc::string_ref> pems =
      auth_ctx ? auth_ctx->FindPropertyValues("x509_pem_cert") : std::vector<grpc::string_ref>{};
  if (pems.empty()) {
    return absl::UnauthenticatedError(
        "no client certificate and no bearer token: this coordinator requires mutual TLS "
        "(credentials from `yoke certs issue`) or a token (`yoke token create`)");
  }
  auto id = VerifyCert(std::string(pems[0].data(), pems[0].size()));
  if (!id.ok()) return id.status();
  c.role = id->role;
  c.name = id->name;
  c.via = "certificate";
  return c;
}

absl::Status Authenticator::CheckRendezvous(const grpc::ServerContext& ctx,
                                            const std::string& job_id, int attempt) const {
  if (insecure()) return absl::OkStatus();
  if (auto secret = Metadata(ctx, kRendezvousSecretHeader)) {
    const std::string want = store_->RendezvousSecret(job_id, attempt);
    if (secret->size() == want.size() &&
        CRYPTO_memcmp(secret->data(), want.data(), want.size()) == 0) {
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError(absl::StrCat(
        "rendezvous: the secret is not the one of attempt ", job_id.substr(0, 64), "/", attempt));
  }
  auto caller = Identify(ctx);
  if (!caller.ok()) {
    return absl::UnauthenticatedError(absl::StrCat("rendezvous: no ", kRendezvousSecretHeader,
                                                   " metadata (", caller.status().message(), ")"));
  }
  return Allow(*caller, {}, "Rendezvous");
}

absl::Status Allow(const Caller& caller, std::initializer_list<common::Role> roles,
                   absl::string_view method) {
  if (caller.role == common::Role::kAdmin) return absl::OkStatus();
  for (common::Role r : roles) {
    if (caller.role == r) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(method, ": not allowed for ",
                                                  common::RoleName(caller.role), " '", caller.name,
                                                  "' (", caller.via, ")"));
}

}  // namespace yoke::server
