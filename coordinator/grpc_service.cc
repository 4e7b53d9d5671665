#include "coordinator/grpc_service.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/version.h"
#include "config/config.h"
#include "coordinator/coordinator_metrics.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "jobspec/job_validate.h"
#include "net/grpc_status.h"
#include "security/tls_credentials.h"
#include "spdlog/spdlog.h"

namespace yoke::server {

namespace {

// glibc keeps what is freed in its arenas, in pages between live chunks that
// it does not return by itself: after a flood of large specs (each parsed
// per call, tens of times its size) the coordinator kept gigabytes it no
// longer used. malloc_trim returns every whole free page, but walks every
// arena, so it runs only when the resident memory not in use by malloc's
// callers (anonymous RSS less the bytes allocated) grew by kTrimStep since
// the last trim.
void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  constexpr int64_t kTrimStep = 16 << 20;
  static int64_t idle_after_trim = 0;  // only the ticker thread calls this
  auto idle_bytes = [] {
    // statm: size, resident, shared (file-backed), ... in pages.
    int64_t size = 0, resident = 0, shared = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld %ld %ld", &size, &resident, &shared) != 3) resident = shared = 0;
      std::fclose(f);
    }
    const struct mallinfo2 mi = mallinfo2();
    const int64_t in_use = static_cast<int64_t>(mi.uordblks + mi.hblkhd);
    return (resident - shared) * static_cast<int64_t>(sysconf(_SC_PAGESIZE)) - in_use;
  };
  if (idle_bytes() < idle_after_trim + kTrimStep) return;
  malloc_trim(0);
  idle_after_trim = idle_bytes();
#endif
}

using common::ToGrpcStatus;

// How often a waiting stream or rendezvous Get looks at cancellation.
constexpr absl::Duration kPoll = absl::Milliseconds(250);
constexpr int kLogBatch = 500;
constexpr int64_t kMaxKvWaitMs = 10 * 60 * 1000;

grpc::Status Invalid(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

using common::Role;

constexpr std::initializer_list<Role> kViewers = {Role::kViewer, Role::kSubmitter};
constexpr std::initializer_list<Role> kSubmitters = {Role::kSubmitter};
constexpr std::initializer_list<Role> kWorkers = {Role::kWorker};

// Identifies the caller and checks its role for `method`; on failure the
// returned status is what the handler returns.
grpc::Status Authorize(const Authenticator* auth, const grpc::ServerContext& ctx,
                       std::initializer_list<Role> roles, absl::string_view method,
                       Caller* caller) {
  auto c = auth->Identify(ctx);
  if (!c.ok()) return ToGrpcStatus(c.status());
  if (absl::Status s = Allow(*c, roles, method); !s.ok()) return ToGrpcStatus(s);
  *caller = std::move(*c);
  return grpc::Status::OK;
}

// Times the handler it is declared in, as yoke_rpc_latency_seconds{method}.
class RpcTimer {
 public:
  RpcTimer(CoordinatorMetrics* m, const char* method) : m_(m), method_(method), t0_(absl::Now()) {}
  ~RpcTimer() {
    if (m_ != nullptr) m_->OnRpc(method_, absl::ToDoubleSeconds(absl::Now() - t0_));
  }
  RpcTimer(const RpcTimer&) = delete;
  RpcTimer& operator=(const RpcTimer&) = delete;

 private:
  CoordinatorMetrics* m_;
  const char* method_;
  absl::Time t0_;
};

#define YOKE_AUTHORIZE(roles, method)                                            \
  RpcTimer rpc_timer(c_->metrics(), method);                                     \
  Caller caller;                                                                 \
  if (grpc::Status auth_status = Authorize(auth_, *ctx, roles, method, &caller); \
      !auth_status.ok())                                                         \
  return auth_status

// The bound of SubmitJob's priority, either way.
constexpr int kMaxPriority = 1000;

// Reflection lists every service and message of the coordinator to whoever
// asks, and its calls bypass the per-method authorization. Debian's
// libgrpc++_reflection registers its plugin for every server of the process
// as soon as it loads (a static initializer), so a secure server has to take
// the plugin out again.
class WithoutReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->erase(
        std::remove_if(plugins->begin(), plugins->end(),
                       [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
                         return dynamic_cast<grpc::reflection::ProtoServerReflectionPlugin*>(
                                    p.get()) != nullptr;
                       }),
        plugins->end());
  }
};

grpc::Status Stopping() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down");
}

}  // namespace

// ------------------------------------------------------------------ Coordinator

absl::StatusOr<v1::JobSpec> SpecFromYaml(const v1::SubmitJobRequest& req) {
  if (req.spec_yaml().size() > kMaxSubmitYamlBytes) {
    return absl::InvalidArgumentError(absl::StrCat("spec_yaml: ", req.spec_yaml().size(),
                                                   " bytes of YAML, more than the ",
                                                   kMaxSubmitYamlBytes, " a submission may have"));
  }
  const std::string name = req.spec_yaml_name().empty()
                               ? std::string("spec_yaml")
                               : common::EscapeControl(req.spec_yaml_name().substr(0, 256));
  std::vector<std::string> overrides(req.overrides().begin(), req.overrides().end());
  return common::LoadJobSpecString(req.spec_yaml(), overrides, name);
}

grpc::Status CoordinatorService::GetVersion(grpc::ServerContext* ctx, const v1::GetVersionRequest*,
                                            v1::GetVersionResponse* resp) {
  YOKE_AUTHORIZE(kViewers, "GetVersion");
  resp->set_version(common::kYokeVersion);
  resp->set_min_client_version(common::kMinClientVersion);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* ctx,
                                           const v1::SubmitJobRequest* req,
                                           v1::SubmitJobResponse* resp) {
  YOKE_AUTHORIZE(kSubmitters, "SubmitJob");
  // Priority orders the whole cluster's queue, so raising it is an admin's
  // call; anyone may lower their own job's (docs/security.md).
  if (req->priority() > kMaxPriority || req->priority() < -kMaxPriority) {
    return Invalid(absl::StrCat("priority: must be within [", -kMaxPriority, ", ", kMaxPriority,
                                "], got ", req->priority()));
  }
  if (req->priority() > 0 && caller.role != Role::kAdmin) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat("priority: only an admin may raise a job above the default 0; ",
                     RoleName(caller.role), " '", caller.name, "' asked for ", req->priority()));
  }
  absl::StatusOr<std::string> id;
  if (!req->spec_yaml().empty()) {
    if (req->has_spec()) return Invalid("spec, spec_yaml: set one of them, not both");
    // Charged to the submit rate before the YAML is parsed.
    id = c_->Submit([req] { return SpecFromYaml(*req); }, req->priority(), caller.name);
  } else if (req->overrides_size() > 0) {
    return Invalid("overrides: only with spec_yaml (apply them to the spec you send)");
  } else if (!req->has_spec()) {
    return Invalid("spec: required");
  } else {
    id = c_->Submit(req->spec(), req->priority(), caller.name);
  }
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                        v1::Job* resp) {
  YOKE_AUTHORIZE(kViewers, "GetJob");
  if (req->job_id().empty()) return Invalid("job_id: required");
  auto job = c_->Get(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                          v1::ListJobsResponse* resp) {
  YOKE_AUTHORIZE(kViewers, "ListJobs");
  JobListQuery q;
  for (int i = 0; i < req->states_size(); ++i) {
    const int s = req->states(i);
    if (s == v1::JOB_STATE_UNSPECIFIED || !v1::JobState_IsValid(s)) {
      return Invalid(absl::StrCat("states[", i, "]: not a job state: ", s));
    }
    q.states.push_back(static_cast<v1::JobState>(s));
  }
  if (req->page_size() < 0) {
    return Invalid(absl::StrCat("page_size: must be >= 0, got ", req->page_size()));
  }
  q.page_size = req->page_size();
  q.page_token = req->page_token();
  q.summary = req->summary();
  auto page = c_->List(q);
  if (!page.ok()) return ToGrpcStatus(page.status());
  for (v1::Job& j : page->jobs) *resp->add_jobs() = std::move(j);
  resp->set_next_page_token(page->next_page_token);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* ctx,
                                           const v1::CancelJobRequest* req, v1::Job* resp) {
  YOKE_AUTHORIZE(kSubmitters, "CancelJob");
  if (req->job_id().empty()) return Invalid("job_id: required");
  if (caller.role != Role::kAdmin) {
    auto job = c_->Get(req->job_id());
    if (!job.ok()) return ToGrpcStatus(job.status());
    if (job->owner() != caller.name) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          absl::StrCat("CancelJob: job ", req->job_id(), " belongs to '",
                                       job->owner(), "', not to submitter '", caller.name, "'"));
    }
  }
  auto job = c_->Cancel(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                          grpc::ServerWriter<v1::JobEvent>* writer) {
  YOKE_AUTHORIZE(kViewers, "WatchJob");
  if (req->job_id().empty()) return Invalid("job_id: required");
  uint64_t version = 0;
  while (true) {
    if (Done(ctx)) return stopping_ ? Stopping() : grpc::Status::CANCELLED;
    auto snap = c_->WaitForJob(req->job_id(), version, kPoll);
    if (!snap.ok()) return ToGrpcStatus(snap.status());
    if (!snap->changed) continue;
    v1::JobEvent ev;
    ev.set_message(version == 0 && snap->message.empty() ? "current state" : snap->message);
    *ev.mutable_job() = std::move(snap->job);
    if (!writer->Write(ev)) return grpc::Status::CANCELLED;  // the client went away
    if (IsTerminal(ev.job().state())) return grpc::Status::OK;
    version = snap->version;
  }
}

grpc::Status CoordinatorService::GetJobLogs(grpc::ServerContext* ctx,
                                            const v1::GetJobLogsRequest* req,
                                            grpc::ServerWriter<v1::LogLine>* writer) {
  YOKE_AUTHORIZE(kViewers, "GetJobLogs");
  if (req->job_id().empty()) return Invalid("job_id: required");
  int64_t since = std::max<int64_t>(req->since_seq(), 0);
  bool ended = false;
  while (true) {
    auto lines = c_->ReadLogs(req->job_id(), since, kLogBatch);
    if (!lines.ok()) return ToGrpcStatus(lines.status());
    for (const v1::LogLine& l : *lines) {
      if (!writer->Write(l)) return grpc::Status::CANCELLED;
      since = l.seq();
    }
    if (static_cast<int>(lines->size()) == kLogBatch) continue;  // more stored
    // The job ended before this read: everything it will ever log is sent.
    if (!req->follow() || ended) return grpc::Status::OK;
    if (Done(ctx)) return stopping_ ? Stopping() : grpc::Status::CANCELLED;
    auto finished = c_->WaitForLogs(req->job_id(), since, kPoll);
    if (!finished.ok()) return ToGrpcStatus(finished.status());
    ended = *finished;
  }
}

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext* ctx,
                                             const v1::ListWorkersRequest*,
                                             v1::ListWorkersResponse* resp) {
  YOKE_AUTHORIZE(kViewers, "ListWorkers");
  for (v1::Worker& w : c_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CreateToken(grpc::ServerContext* ctx,
                                             const v1::CreateTokenRequest* req,
                                             v1::CreateTokenResponse* resp) {
  YOKE_AUTHORIZE({}, "CreateToken");
  if (tokens_ == nullptr || auth_->insecure()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "CreateToken: this coordinator runs --insecure; tokens need TLS");
  }
  auto role = common::ParseRole(req->role());
  if (!role.ok()) return ToGrpcStatus(role.status());
  const absl::Time now = absl::Now();
  auto token = tokens_->CreateToken(*role, req->name(), absl::Seconds(req->ttl_seconds()), now);
  if (!token.ok()) return ToGrpcStatus(token.status());
  resp->set_token(*token);
  resp->set_id(token->substr(5, 16));
  resp->set_expire_time_ms(absl::ToUnixMillis(now + absl::Seconds(req->ttl_seconds())));
  spdlog::info("token {} created for {} '{}' by '{}', valid {}s", resp->id(), req->role(),
               req->name(), caller.name, req->ttl_seconds());
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::RevokeToken(grpc::ServerContext* ctx,
                                             const v1::RevokeTokenRequest* req,
                                             v1::RevokeTokenResponse*) {
  YOKE_AUTHORIZE({}, "RevokeToken");
  if (tokens_ == nullptr || auth_->insecure()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "RevokeToken: this coordinator runs --insecure; tokens need TLS");
  }
  if (req->id().empty()) return Invalid("id: required");
  if (absl::Status s = tokens_->RevokeToken(req->id()); !s.ok()) return ToGrpcStatus(s);
  spdlog::info("token {} revoked by '{}'", req->id().substr(0, 21), caller.name);
  return grpc::Status::OK;
}

// ------------------------------------------------------------------ WorkerControl

namespace {

// A worker with a certificate acts only as the id it binds it to: its name,
// or for a pool certificate ("PREFIX-*") any id "PREFIX-...".
grpc::Status CheckWorkerId(const Caller& caller, const std::string& claimed, const char* method) {
  if (!caller.secure || claimed.empty() || claimed == caller.name) return grpc::Status::OK;
  if (absl::EndsWith(caller.name, "-*") &&
      absl::StartsWith(claimed, caller.name.substr(0, caller.name.size() - 1))) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat(method, ": certificate '", caller.name,
                                   "' may not act as worker '", claimed.substr(0, 64), "'"));
}

}  // namespace

grpc::Status WorkerControlService::RegisterWorker(grpc::ServerContext* ctx,
                                                  const v1::RegisterWorkerRequest* req,
                                                  v1::RegisterWorkerResponse* resp) {
  YOKE_AUTHORIZE(kWorkers, "RegisterWorker");
  std::string bound;
  if (caller.secure) {
    auto id = common::WorkerIdFor(caller.name, req->hostname());
    if (!id.ok()) return ToGrpcStatus(id.status());
    bound = *id;
    if (!req->worker_id().empty() && req->worker_id() != bound) {
      return grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat("RegisterWorker: certificate '", caller.name, "' registers as worker '",
                       bound, "', not as ", common::Quote(req->worker_id(), 64)));
    }
  }
  auto r = c_->RegisterWorker(*req, bound);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status WorkerControlService::Heartbeat(grpc::ServerContext* ctx,
                                             const v1::HeartbeatRequest* req,
                                             v1::HeartbeatResponse* resp) {
  YOKE_AUTHORIZE(kWorkers, "Heartbeat");
  if (req->worker_id().empty()) return Invalid("worker_id: required");
  if (grpc::Status s = CheckWorkerId(caller, req->worker_id(), "Heartbeat"); !s.ok()) return s;
  auto r = c_->Heartbeat(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

// ------------------------------------------------------------------ Rendezvous

grpc::Status RendezvousService::Put(grpc::ServerContext* ctx, const v1::KvPutRequest* req,
                                    v1::KvPutResponse*) {
  RpcTimer rpc_timer(c_->metrics(), "Put");
  if (req->job_id().empty()) return Invalid("job_id: required");
  if (req->attempt() <= 0)
    return Invalid(absl::StrCat("attempt: must be > 0, got ", req->attempt()));
  if (absl::Status s = auth_->CheckRendezvous(*ctx, req->job_id(), req->attempt()); !s.ok()) {
    return ToGrpcStatus(s);
  }
  return ToGrpcStatus(
      c_->rendezvous()->Put(req->job_id(), req->attempt(), req->key(), req->value()));
}

grpc::Status RendezvousService::Get(grpc::ServerContext* ctx, const v1::KvGetRequest* req,
                                    v1::KvGetResponse* resp) {
  RpcTimer rpc_timer(c_->metrics(), "Get");
  if (req->job_id().empty()) return Invalid("job_id: required");
  if (req->attempt() <= 0)
    return Invalid(absl::StrCat("attempt: must be > 0, got ", req->attempt()));
  if (absl::Status s = auth_->CheckRendezvous(*ctx, req->job_id(), req->attempt()); !s.ok()) {
    return ToGrpcStatus(s);
  }
  if (req->timeout_ms() < 0) {
    return Invalid(absl::StrCat("timeout_ms: must be >= 0, got ", req->timeout_ms()));
  }
  const absl::Duration total = absl::Milliseconds(std::min(req->timeout_ms(), kMaxKvWaitMs));
  const absl::Time deadline = absl::Now() + total;
  // Waits in slices so a cancelled call or a shutdown frees the thread.
  while (true) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    auto v =
        c_->rendezvous()->Get(req->job_id(), req->attempt(), req->key(), std::min(left, kPoll));
    if (v.ok()) {
      resp->set_value(std::move(*v));
      return grpc::Status::OK;
    }
    if (v.status().code() != absl::StatusCode::kDeadlineExceeded || left <= kPoll) {
      if (v.status().code() == absl::StatusCode::kDeadlineExceeded) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            absl::StrCat("rendezvous: key ", common::Quote(req->key()),
                                         " of attempt ", req->job_id(), "/", req->attempt(),
                                         " not set within ", req->timeout_ms(), " ms"));
      }
      return ToGrpcStatus(v.status());
    }
    if (stopping_) return Stopping();
    if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
  }
}

// ------------------------------------------------------------------ server

CoordinatorServer::CoordinatorServer(Coordinator* c, const ServerOptions& options,
                                     std::unique_ptr<Authenticator> auth)
    : coordinator_(c),
      options_(options),
      auth_(std::move(auth)),
      coordinator_service_(c, auth_.get(), options.auth_store),
      worker_service_(c, auth_.get()),
      rendezvous_service_(c, auth_.get()) {}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    Coordinator* coordinator, const ServerOptions& options) {
  std::unique_ptr<Authenticator> auth;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  bool without_reflection = false;
  if (options.tls.has_value()) {
    if (options.auth_store == nullptr) {
      return absl::InvalidArgumentError("ServerOptions: tls needs an auth_store");
    }
    if (options.tls->leaf.cert_pem.empty()) {
      return absl::InvalidArgumentError("tls: the coordinator needs tls.crt and tls.key");
    }
    auto a = Authenticator::Secure(options.tls->ca_pem, options.auth_store);
    if (!a.ok()) return a.status();
    auth = std::move(*a);
    credentials = common::TlsServerCredentials(*options.tls);
    without_reflection = true;
  } else {
    auth = Authenticator::Insecure();
    credentials = grpc::InsecureServerCredentials();
    // Reflection only where anyone may call anything anyway.
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  }
  std::unique_ptr<CoordinatorServer> s(
      new CoordinatorServer(coordinator, options, std::move(auth)));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  if (without_reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  // Without this a second coordinator could bind the same port and split
  // the workers between two schedulers.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen, credentials, &s->port_);
  builder.RegisterService(&s->coordinator_service_);
  builder.RegisterService(&s->worker_service_);
  builder.RegisterService(&s->rendezvous_service_);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("listen: cannot serve on '", options.listen, "' (address in use or invalid)"));
  }
  const size_t colon = options.listen.rfind(':');
  s->address_ = absl::StrCat(options.listen.substr(0, colon), ":", s->port_);
  s->ticker_ = std::thread([srv = s.get()] {
    while (!srv->stop_ticking_.WaitForNotificationWithTimeout(srv->options_.tick_interval)) {
      srv->coordinator_->Tick();
      // Large specs are parsed per call and freed; hand the pages back.
      ReleaseFreedMemory();
    }
  });
  return s;
}

void CoordinatorServer::Shutdown() {
  if (shut_down_.exchange(true)) {
    done_.WaitForNotification();
    return;
  }
  coordinator_service_.StopStreams();
  rendezvous_service_.StopWaits();
  if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + options_.shutdown_grace));
  stop_ticking_.Notify();
  if (ticker_.joinable()) ticker_.join();
  done_.Notify();
}

void CoordinatorServer::Wait() { done_.WaitForNotification(); }

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

}  // namespace yoke::server
