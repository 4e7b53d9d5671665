#include "collective/coordinator_store.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "net/grpc_status.h"

namespace yoke::collective {
namespace {

// How long past the server-side wait the client deadline reaches, so the
// server's DEADLINE_EXCEEDED (which names the key) arrives before ours.
constexpr absl::Duration kRpcSlack = absl::Seconds(5);

// Runs `call` (one RPC with the given deadline) until it returns anything but
// UNAVAILABLE or `give_up` passes, sleeping with exponential backoff between
// tries.
template <typename Call>
absl::Status RetryUnavailable(const CoordinatorStoreOptions& o, absl::Time give_up, Call call) {
  absl::Duration backoff = o.initial_backoff;
  while (true) {
    absl::Status s = call();
    if (s.code() != absl::StatusCode::kUnavailable) return s;
    const absl::Time now = absl::Now();
    if (now + backoff >= give_up) return s;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, o.max_backoff);
  }
}

std::shared_ptr<grpc::ChannelCredentials> CredentialsFor(const CoordinatorStoreOptions& o) {
  if (o.tls_ca_pem.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = o.tls_ca_pem;
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<CoordinatorStoreOptions> CoordinatorStoreOptions::FromEnvironment() {
  CoordinatorStoreOptions o;
  if (const char* secret = std::getenv("YOKE_RENDEZVOUS_SECRET")) o.secret = secret;
  const char* ca = std::getenv("YOKE_TLS_CA");
  if (ca == nullptr || *ca == '\0') return o;
  std::ifstream in(ca, std::ios::binary);
  std::string pem((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.eof() && in.fail()) pem.clear();
  if (pem.empty() || pem.size() > 64 * 1024) {
    return absl::FailedPreconditionError(
        absl::StrCat("YOKE_TLS_CA: cannot read a CA certificate (at most 64 KiB) from ", ca));
  }
  o.tls_ca_pem = std::move(pem);
  return o;
}

CoordinatorStore::CoordinatorStore(const std::string& target, std::string job_id, int attempt,
                                   CoordinatorStoreOptions options)
    : CoordinatorStore(grpc::CreateChannel(target, CredentialsFor(options)), target,
                       std::move(job_id), attempt, options) {}

CoordinatorStore::CoordinatorStore(std::shared_ptr<grpc::Channel> channel, std::string target,
                                   std::string job_id, int attempt, CoordinatorStoreOptions options)
    : target_(std::move(target)),
      job_id_(std::move(job_id)),
      attempt_(attempt),
      options_(options),
      channel_(channel),
      stub_(v1::Rendezvous::NewStub(std::move(channel))) {}

void CoordinatorStore::AwaitConnection() {
  // Polls a reconnecting channel (nothing else does between calls but gRPC's
  // 5 s backup poller, too slow for a TLS handshake); the call after it
  // fails fast with the connection's error if this times out.
  if (channel_->GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) return;
  channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
}

std::string CoordinatorStore::Where(absl::string_view key) const {
  return absl::StrCat("rendezvous key '", key, "' of ", job_id_, "/", attempt_, " on coordinator ",
                      target_);
}

absl::Status CoordinatorStore::Set(absl::string_view key, absl::string_view value) {
  v1::KvPutRequest req;
  req.set_job_id(job_id_);
  req.set_attempt(attempt_);
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  const absl::Time give_up = absl::Now() + options_.unavailable_timeout;
  absl::Status s = RetryUnavailable(options_, give_up, [&] {
    AwaitConnection();
    grpc::ClientContext ctx;
    if (!options_.secret.empty()) ctx.AddMetadata("yoke-rendezvous-secret", options_.secret);
    ctx.set_deadline(absl::ToChronoTime(std::max(give_up, absl::Now() + absl::Seconds(1))));
    v1::KvPutResponse resp;
    return common::FromGrpcStatus(stub_->Put(&ctx, req, &resp));
  });
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("set ", Where(key), ": ", s.message()));
}

absl::StatusOr<std::string> CoordinatorStore::Get(absl::string_view key, absl::Duration timeout) {
  timeout = std::max(timeout, absl::ZeroDuration());
  v1::KvGetRequest req;
  req.set_job_id(job_id_);
  req.set_attempt(attempt_);
  req.set_key(std::string(key));
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  const absl::Time give_up = start + std::max(timeout, options_.unavailable_timeout);
  v1::KvGetResponse resp;
  absl::Status s = RetryUnavailable(options_, give_up, [&] {
    // After an UNAVAILABLE retry, wait only for what is left of the timeout.
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    req.set_timeout_ms(absl::ToInt64Milliseconds(left));
    AwaitConnection();
    grpc::ClientContext ctx;
    if (!options_.secret.empty()) ctx.AddMetadata("yoke-rendezvous-secret", options_.secret);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + left + kRpcSlack));
    return common::FromGrpcStatus(stub_->Get(&ctx, req, &resp));
  });
  if (s.ok()) return std::move(*resp.mutable_value());
  return absl::Status(s.code(), absl::StrCat("get ", Where(key), " (timeout ",
                                             absl::FormatDuration(timeout), "): ", s.message()));
}

}  // namespace yoke::collective
