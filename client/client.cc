#include "client/client.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cluster_state.h"
#include "net/grpc_status.h"
#include "security/certs.h"
#include "security/tls_credentials.h"

namespace yoke::client {

std::string ResolveCoordinatorAddress(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("YOKE_COORDINATOR"); env != nullptr && *env != '\0') {
    return env;
  }
  // A stale state file (the cluster was killed without `yoke down`) still
  // gives the right answer: nobody listens there, and the UNAVAILABLE
  // message says so.
  auto st = ReadClusterState(DefaultClusterStatePath());
  if (st.ok()) return st->address;
  return kDefaultCoordinatorAddress;
}

absl::Status FromGrpcStatus(const grpc::Status& s, const std::string& address) {
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
      (s.error_message().find("andshake") != std::string::npos ||
       s.error_message().find("SSL") != std::string::npos)) {
    return absl::UnavailableError(absl::StrCat(
        "TLS with the coordinator at ", address,
        " failed (is its certificate from the CA in your --tls-dir, and for this address? does "
        "it run --insecure?): ",
        s.error_message()));
  }
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    // gRPC's own text ("failed to connect to all addresses; ...") does not
    // tell a user what to do; keep it at the end for debugging.
    return absl::UnavailableError(
        absl::StrCat("cannot reach the coordinator at ", address,
                     " (is it running? start one with `yoke up`): ", s.error_message()));
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the coordinator at ", address, " did not answer in time: ", s.error_message()));
  }
  return common::FromGrpcStatus(s);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ResolveCredentials(
    const CredentialFlags& flags) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v == nullptr ? "" : v);
  };
  if (flags.insecure || env("YOKE_INSECURE") == "1") return grpc::InsecureChannelCredentials();
  std::string dir = flags.tls_dir.empty() ? env("YOKE_TLS_DIR") : flags.tls_dir;
  const std::string token = flags.token.empty() ? env("YOKE_TOKEN") : flags.token;
  if (dir.empty()) {
    auto st = ReadClusterState(DefaultClusterStatePath());
    if (st.ok() && st->tls_dir.empty()) return grpc::InsecureChannelCredentials();
    if (st.ok()) dir = st->tls_dir;
  }
  if (dir.empty()) {
    return absl::FailedPreconditionError(
        "no credentials for the coordinator: pass --tls-dir DIR (ca.crt, tls.crt, tls.key from "
        "`yoke certs issue`) or set $YOKE_TLS_DIR, add --token (or $YOKE_TOKEN) for a bearer "
        "token, or --insecure for a coordinator that runs --insecure");
  }
  auto c = common::ReadCredentialsDir(dir, /*need_leaf=*/false);
  if (!c.ok())
    return absl::Status(c.status().code(), absl::StrCat("--tls-dir: ", c.status().message()));
  return common::TlsChannelCredentials(*c, token);
}

CoordinatorClient::CoordinatorClient(std::string address, ClientOptions options)
    : address_(std::move(address)), options_(options) {
  grpc::ChannelArguments args;
  // Fail fast between reconnect attempts rather than backing off for up to
  // two minutes: `yoke watch` reconnects on its own schedule.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetMaxReceiveMessageSize(64 << 20);
  channel_ = grpc::CreateCustomChannel(
      address_, options_.credentials ? options_.credentials : grpc::InsecureChannelCredentials(),
      args);
  stub_ = v1::Coordinator::NewStub(channel_);
}

void CoordinatorClient::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + options_.unary_timeout);
}

absl::StatusOr<std::string> CoordinatorClient::SubmitJob(const v1::JobSpec& spec, int priority) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  req.set_priority(priority);
  v1::SubmitJobResponse resp;
  absl::Status s = FromGrpcStatus(stub_->SubmitJob(&ctx, req, &resp), address_);
  if (!s.ok()) return s;
  return resp.job_id();
}

absl::StatusOr<v1::Job> CoordinatorClient::GetJob(const std::string& job_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  absl::Status s = FromGrpcStatus(stub_->GetJob(&ctx, req, &job), address_);
  if (!s.ok()) return s;
  return job;
}

absl::StatusOr<std::vector<v1::Job>> CoordinatorClient::ListJobs(
    const std::vector<v1::JobState>& states, bool summary) {
  std::vector<v1::Job> jobs;
  std::string token;
  // A server that keeps returning the same token would loop forever; no
  // coordinator holds more than this many pages of 1000.
  for (int page = 0; page < 100000; ++page) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    v1::ListJobsRequest req;
    for (auto st : states) req.add_states(st);
    req.set_page_size(1000);
    req.set_page_token(token);
    req.set_summary(summary);
    v1::ListJobsResponse resp;
    absl::Status s = FromGrpcStatus(stub_->ListJobs(&ctx, req, &resp), address_);
    if (!s.ok()) return s;
    for (auto& j : *resp.mutable_jobs()) jobs.push_back(std::move(j));
    if (resp.next_page_token().empty() || resp.next_page_token() == token) return jobs;
    token = resp.next_page_token();
  }
  return absl::InternalError("ListJobs: the coordinator returned too many pages");
}

absl::StatusOr<v1::Job> CoordinatorClient::CancelJob(const std::string& job_id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  v1::Job job;
  absl::Status s = FromGrpcStatus(stub_->CancelJob(&ctx, req, &job), address_);
  if (!s.ok()) return s;
  return job;
}

absl::StatusOr<std::vector<v1::Worker>> CoordinatorClient::ListWorkers() {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::ListWorkersResponse resp;
  absl::Status s =
      FromGrpcStatus(stub_->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp), address_);
  if (!s.ok()) return s;
  return std::vector<v1::Worker>(resp.workers().begin(), resp.workers().end());
}

absl::StatusOr<v1::CreateTokenResponse> CoordinatorClient::CreateToken(const std::string& role,
                                                                       const std::string& name,
                                                                       absl::Duration ttl) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::CreateTokenRequest req;
  req.set_role(role);
  req.set_name(name);
  req.set_ttl_seconds(absl::ToInt64Seconds(ttl));
  v1::CreateTokenResponse resp;
  absl::Status s = FromGrpcStatus(stub_->CreateToken(&ctx, req, &resp), address_);
  if (!s.ok()) return s;
  return resp;
}

absl::Status CoordinatorClient::RevokeToken(const std::string& id) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  v1::RevokeTokenRequest req;
  req.set_id(id);
  v1::RevokeTokenResponse resp;
  return FromGrpcStatus(stub_->RevokeToken(&ctx, req, &resp), address_);
}

absl::Status CoordinatorClient::WatchJob(const std::string& job_id,
                                         const std::function<bool(const v1::JobEvent&)>& on_event) {
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  auto reader = stub_->WatchJob(&ctx, req);
  v1::JobEvent ev;
  while (reader->Read(&ev)) {
    if (!on_event(ev)) {
      ctx.TryCancel();
      reader->Finish();
      return absl::OkStatus();
    }
  }
  return FromGrpcStatus(reader->Finish(), address_);
}

absl::Status CoordinatorClient::GetJobLogs(const std::string& job_id, bool follow,
                                           int64_t since_seq,
                                           const std::function<bool(const v1::LogLine&)>& on_line) {
  grpc::ClientContext ctx;
  if (!follow) SetDeadline(&ctx);
  v1::GetJobLogsRequest req;
  req.set_job_id(job_id);
  req.set_follow(follow);
  req.set_since_seq(since_seq);
  auto reader = stub_->GetJobLogs(&ctx, req);
  v1::LogLine line;
  while (reader->Read(&line)) {
    if (!on_line(line)) {
      ctx.TryCancel();
      reader->Finish();
      return absl::OkStatus();
    }
  }
  return FromGrpcStatus(reader->Finish(), address_);
}

}  // namespace yoke::client
