#include "server/grpc_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "spdlog/spdlog.h"

namespace yoke::server {
namespace {

using common::ToGrpcStatus;

// How often a waiting stream or rendezvous Get looks at cancellation.
constexpr absl::Duration kPoll = absl::Milliseconds(250);
constexpr int kLogBatch = 500;
constexpr int64_t kMaxKvWaitMs = 10 * 60 * 1000;

grpc::Status Invalid(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

grpc::Status Stopping() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator is shutting down");
}

}  // namespace

// ------------------------------------------------------------------ Coordinator

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                                           v1::SubmitJobResponse* resp) {
  if (!req->has_spec()) return Invalid("spec: required");
  auto id = c_->Submit(req->spec(), req->priority());
  if (!id.ok()) return ToGrpcStatus(id.status());
  resp->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext*, const v1::GetJobRequest* req,
                                        v1::Job* resp) {
  if (req->job_id().empty()) return Invalid("job_id: required");
  auto job = c_->Get(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                                          v1::ListJobsResponse* resp) {
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
  auto page = c_->List(q);
  if (!page.ok()) return ToGrpcStatus(page.status());
  for (v1::Job& j : page->jobs) *resp->add_jobs() = std::move(j);
  resp->set_next_page_token(page->next_page_token);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                                           v1::Job* resp) {
  if (req->job_id().empty()) return Invalid("job_id: required");
  auto job = c_->Cancel(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                          grpc::ServerWriter<v1::JobEvent>* writer) {
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

grpc::Status CoordinatorService::ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                                             v1::ListWorkersResponse* resp) {
  for (v1::Worker& w : c_->ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

// ------------------------------------------------------------------ WorkerControl

grpc::Status WorkerControlService::RegisterWorker(grpc::ServerContext*,
                                                  const v1::RegisterWorkerRequest* req,
                                                  v1::RegisterWorkerResponse* resp) {
  auto r = c_->RegisterWorker(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status WorkerControlService::Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                                             v1::HeartbeatResponse* resp) {
  auto r = c_->Heartbeat(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

// ------------------------------------------------------------------ Rendezvous

grpc::Status RendezvousService::Put(grpc::ServerContext*, const v1::KvPutRequest* req,
                                    v1::KvPutResponse*) {
  if (req->job_id().empty()) return Invalid("job_id: required");
  if (req->attempt() <= 0) return Invalid(absl::StrCat("attempt: must be > 0, got ", req->attempt()));
  return ToGrpcStatus(c_->rendezvous()->Put(req->job_id(), req->attempt(), req->key(), req->value()));
}

grpc::Status RendezvousService::Get(grpc::ServerContext* ctx, const v1::KvGetRequest* req,
                                    v1::KvGetResponse* resp) {
  if (req->job_id().empty()) return Invalid("job_id: required");
  if (req->attempt() <= 0) return Invalid(absl::StrCat("attempt: must be > 0, got ", req->attempt()));
  if (req->timeout_ms() < 0) {
    return Invalid(absl::StrCat("timeout_ms: must be >= 0, got ", req->timeout_ms()));
  }
  const absl::Duration total = absl::Milliseconds(std::min(req->timeout_ms(), kMaxKvWaitMs));
  const absl::Time deadline = absl::Now() + total;
  // Waits in slices so a cancelled call or a shutdown frees the thread.
  while (true) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    auto v = c_->rendezvous()->Get(req->job_id(), req->attempt(), req->key(), std::min(left, kPoll));
    if (v.ok()) {
      resp->set_value(std::move(*v));
      return grpc::Status::OK;
    }
    if (v.status().code() != absl::StatusCode::kDeadlineExceeded || left <= kPoll) {
      if (v.status().code() == absl::StatusCode::kDeadlineExceeded) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            absl::StrCat("rendezvous: key '", req->key(), "' of attempt ",
                                         req->job_id(), "/", req->attempt(), " not set within ",
                                         req->timeout_ms(), " ms"));
      }
      return ToGrpcStatus(v.status());
    }
    if (stopping_) return Stopping();
    if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
  }
}

// ------------------------------------------------------------------ server

CoordinatorServer::CoordinatorServer(Coordinator* c, const ServerOptions& options)
    : coordinator_(c),
      options_(options),
      coordinator_service_(c),
      worker_service_(c),
      rendezvous_service_(c) {}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    Coordinator* coordinator, const ServerOptions& options) {
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer(coordinator, options));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Without this a second coordinator could bind the same port and split
  // the workers between two schedulers.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &s->port_);
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
