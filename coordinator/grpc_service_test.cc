// Loopback tests: the real services on 127.0.0.1 with a free port, real gRPC
// clients; only the store (in memory) is a fake.
#include "coordinator/grpc_service.h"

#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "config/config.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"

namespace yoke::server {
namespace {

constexpr char kSpec[] = R"(
name: loopback
model: {zoo: mlp, hidden: [8]}
data:
  train: {format: synthetic, shape: [4, 4, 1], num_classes: 2, num_examples: 64}
training:
  epochs: 1
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
)";

v1::JobSpec Spec(const std::vector<std::string>& overrides = {}) {
  auto s = common::LoadJobSpecString(kSpec, overrides);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

class GrpcServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CoordinatorOptions o;
    o.data_roots = {"/data"};
    o.checkpoint_roots = {"/ckpt"};
    auto c = Coordinator::Create(&store_, common::RealClock::Get(), o);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.tick_interval = absl::Milliseconds(50);
    auto s = CoordinatorServer::Start(coord_.get(), so);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
    ASSERT_NE(server_->port(), 0);
    EXPECT_EQ(server_->address(), "127.0.0.1:" + std::to_string(server_->port()));
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    jobs_ = v1::Coordinator::NewStub(channel_);
    workers_ = v1::WorkerControl::NewStub(channel_);
    kv_ = v1::Rendezvous::NewStub(channel_);
  }
  void TearDown() override {
    server_.reset();
    coord_.reset();
  }

  grpc::Status Submit(const v1::JobSpec& spec, std::string* id, int priority = 0) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    req.set_priority(priority);
    v1::SubmitJobResponse resp;
    grpc::Status s = jobs_->SubmitJob(&ctx, req, &resp);
    if (id) *id = resp.job_id();
    return s;
  }

  v1::ListJobsResponse List(std::vector<v1::JobState> states = {}, int page_size = 0,
                            const std::string& token = "") {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    for (v1::JobState s : states) req.add_states(s);
    req.set_page_size(page_size);
    req.set_page_token(token);
    v1::ListJobsResponse resp;
    grpc::Status s = jobs_->ListJobs(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  v1::HeartbeatResponse Beat(const std::string& worker, std::vector<v1::AttemptStatus> st = {}) {
    grpc::ClientContext ctx;
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    for (auto& a : st) *req.add_attempts() = a;
    v1::HeartbeatResponse resp;
    grpc::Status s = workers_->Heartbeat(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  // Sends raw bytes as the request of `method`; returns the status and, in
  // `*out`, the raw response.
  grpc::Status RawCall(const std::string& method, const std::string& bytes,
                       std::string* out = nullptr) {
    grpc::GenericStub stub(channel_);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    absl::Notification done;
    grpc::Status result;
    stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      result = s;
      done.Notify();
    });
    done.WaitForNotification();
    if (out && result.ok()) {
      std::vector<grpc::Slice> slices;
      EXPECT_TRUE(response.Dump(&slices).ok());
      out->clear();
      for (const grpc::Slice& s : slices) {
        out->append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    return result;
  }

  InMemoryJobStore store_;
  std::unique_ptr<Coordinator> coord_;
  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> jobs_;
  std::unique_ptr<v1::WorkerControl::Stub> workers_;
  std::unique_ptr<v1::Rendezvous::Stub> kv_;
};

TEST_F(GrpcServiceTest, BadSpecsAreInvalidArgumentNamingTheFieldAndNothingIsStored) {
  grpc::Status s = Submit(Spec({"training.batch_size=-64"}), nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("training.batch_size: must be > 0, got -64"), std::string::npos)
      << s.error_message();

  v1::JobSpec outside = Spec();
  v1::DatasetSpec* train = outside.mutable_data()->mutable_train();
  train->Clear();
  train->set_format("idx");
  train->set_images("/home/me/train-images.gz");
  train->set_labels("/data/train-labels.gz");
  s = Submit(outside, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("data.train.images"), std::string::npos) << s.error_message();

  s = Submit(Spec({"checkpoint.dir=/data/ckpt"}), nullptr);  // not a checkpoint root
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("checkpoint.dir"), std::string::npos) << s.error_message();

  grpc::ClientContext ctx;
  v1::SubmitJobResponse resp;
  s = jobs_->SubmitJob(&ctx, v1::SubmitJobRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "spec: required");

  EXPECT_EQ(List().jobs_size(), 0);
  EXPECT_EQ(store_.writes(), 0);
}

// Watches one job from a thread, collecting its events until the stream
// ends. The stream coalesces changes a slow reader has not read yet, so a
// test waits for the watcher to see each state before it causes the next
// one (a busy machine can delay the watcher's thread by far more than any
// fixed sleep). The destructor cancels a watch still open.
class JobWatcher {
 public:
  JobWatcher(v1::Coordinator::Stub* jobs, const std::string& id)
      : thread_([this, jobs, id] {
          v1::WatchJobRequest req;
          req.set_job_id(id);
          auto reader = jobs->WatchJob(&ctx_, req);
          v1::JobEvent ev;
          while (reader->Read(&ev)) {
            absl::MutexLock lock(&mu_);
            events_.push_back(ev);
          }
          status_ = reader->Finish();
        }) {}
  ~JobWatcher() {
    ctx_.TryCancel();
    if (thread_.joinable()) thread_.join();
  }

  // Whether the watcher saw an event of `state` within 30 s.
  bool WaitForState(v1::JobState state) {
    absl::MutexLock lock(&mu_);
    auto seen = [&] {
      for (const v1::JobEvent& ev : events_) {
        if (ev.job().state() == state) return true;
      }
      return false;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(30));
  }

  // Waits for the stream to end; its status. events() is complete after.
  grpc::Status Join() {
    thread_.join();
    return status_;
  }
  const std::vector<v1::JobEvent>& events() const { return events_; }

 private:
  grpc::ClientContext ctx_;
  absl::Mutex mu_;
  std::vector<v1::JobEvent> events_;  // guarded by mu_ until Join
  grpc::Status status_;
  std::thread thread_;  // last: it starts once the members it uses exist
};

// Rendezvous on the running attempt 1 of job `id`: a put key reads back, and
// a get of a key never put times out naming it.
void ExpectRendezvousOnTheRunningAttempt(v1::Rendezvous::Stub* kv, const std::string& id) {
  {
    grpc::ClientContext ctx;
    v1::KvPutRequest put;
    put.set_job_id(id);
    put.set_attempt(1);
    put.set_key("gloo/rank0");
    put.set_value("127.0.0.1:5555");
    v1::KvPutResponse presp;
    ASSERT_TRUE(kv->Put(&ctx, put, &presp).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::KvGetRequest get;
    get.set_job_id(id);
    get.set_attempt(1);
    get.set_key("gloo/rank0");
    get.set_timeout_ms(1000);
    v1::KvGetResponse gresp;
    ASSERT_TRUE(kv->Get(&ctx, get, &gresp).ok());
    EXPECT_EQ(gresp.value(), "127.0.0.1:5555");
  }
  grpc::ClientContext ctx;
  v1::KvGetRequest get;
  get.set_job_id(id);
  get.set_attempt(1);
  get.set_key("never");
  get.set_timeout_ms(300);
  v1::KvGetResponse gresp;
  const absl::Time start = absl::Now();
  grpc::Status s = kv->Get(&ctx, get, &gresp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(290));
  EXPECT_NE(s.error_message().find("'never'"), std::string::npos);
}

// After job `id` SUCCEEDED on the one worker w-1 ("fake-host"): its logs,
// followed, are every line and then the end; GetJob and ListWorkers show it.
void ExpectTheFinishedJobAndItsWorker(v1::Coordinator::Stub* jobs, const std::string& id) {
  // Logs, with follow on a finished job: all lines, then the stream ends.
  grpc::ClientContext lctx;
  v1::GetJobLogsRequest lreq;
  lreq.set_job_id(id);
  lreq.set_follow(true);
  auto reader = jobs->GetJobLogs(&lctx, lreq);
  std::vector<std::string> texts;
  v1::LogLine line;
  while (reader->Read(&line)) texts.push_back(line.text());
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(texts, (std::vector<std::string>{"step 3/8 loss 0.69", "done"}));

  // GetJob and ListWorkers.
  grpc::ClientContext gctx;
  v1::GetJobRequest greq;
  greq.set_job_id(id);
  v1::Job job;
  ASSERT_TRUE(jobs->GetJob(&gctx, greq, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_SUCCEEDED);
  grpc::ClientContext wctx;
  v1::ListWorkersResponse wresp;
  ASSERT_TRUE(jobs->ListWorkers(&wctx, v1::ListWorkersRequest(), &wresp).ok());
  ASSERT_EQ(wresp.workers_size(), 1);
  EXPECT_EQ(wresp.workers(0).id(), "w-1");
  EXPECT_TRUE(wresp.workers(0).alive());
  EXPECT_EQ(wresp.workers(0).hostname(), "fake-host");
  EXPECT_EQ(wresp.workers(0).free_cpu(), 1);
}

TEST_F(GrpcServiceTest, JobRunsToSucceededThroughTheWorkerProtocol) {
  grpc::ClientContext rctx;
  v1::RegisterWorkerRequest reg;
  reg.set_hostname("fake-host");
  v1::Device* d = reg.add_devices();
  d->set_kind("cpu");
  d->set_index(0);
  v1::RegisterWorkerResponse rresp;
  ASSERT_TRUE(workers_->RegisterWorker(&rctx, reg, &rresp).ok());
  const std::string w = rresp.worker_id();
  EXPECT_EQ(w, "w-1");
  EXPECT_EQ(rresp.heartbeat_interval_ms(), 1000);

  std::string id;
  ASSERT_TRUE(Submit(Spec(), &id).ok());
  EXPECT_EQ(id, "job-000001");

  // A watcher from the start; it must see the job through to SUCCEEDED.
  JobWatcher watcher(jobs_.get(), id);
  EXPECT_TRUE(watcher.WaitForState(v1::JOB_SCHEDULED));

  v1::HeartbeatResponse hb = Beat(w);
  ASSERT_EQ(hb.desired_size(), 1);
  EXPECT_EQ(hb.desired(0).job_id(), id);
  EXPECT_EQ(hb.desired(0).attempt(), 1);
  EXPECT_EQ(hb.desired(0).spec().name(), "loopback");

  v1::AttemptStatus st;
  st.set_job_id(id);
  st.set_attempt(1);
  st.set_phase(v1::AttemptStatus::RUNNING);
  st.mutable_progress()->set_step(3);
  st.mutable_progress()->set_total_steps(8);
  st.add_logs()->set_text("step 3/8 loss 0.69");
  Beat(w, {st});
  EXPECT_TRUE(watcher.WaitForState(v1::JOB_RUNNING));

  ASSERT_NO_FATAL_FAILURE(ExpectRendezvousOnTheRunningAttempt(kv_.get(), id));

  st.set_phase(v1::AttemptStatus::EXITED);
  st.set_exit_code(0);
  st.clear_logs();
  st.add_logs()->set_text("done");
  st.mutable_result()->set_test_accuracy(0.91);
  st.mutable_result()->set_steps(8);
  v1::EpochResult* e = st.add_epochs();
  e->set_epoch(1);
  e->set_test_accuracy(0.91);
  EXPECT_EQ(Beat(w, {st}).desired_size(), 0);
  const grpc::Status watch_status = watcher.Join();

  ASSERT_TRUE(watch_status.ok()) << watch_status.error_message();
  const std::vector<v1::JobEvent>& events = watcher.events();
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().job().state(), v1::JOB_SCHEDULED);
  bool saw_running = false;
  for (const v1::JobEvent& ev : events) saw_running |= ev.job().state() == v1::JOB_RUNNING;
  EXPECT_TRUE(saw_running);
  const v1::Job& last = events.back().job();
  EXPECT_EQ(last.state(), v1::JOB_SUCCEEDED);
  EXPECT_DOUBLE_EQ(last.result().test_accuracy(), 0.91);
  ASSERT_EQ(last.history_size(), 1);

  // The attempt ended: its rendezvous namespace is gone.
  {
    grpc::ClientContext ctx;
    v1::KvGetRequest get;
    get.set_job_id(id);
    get.set_attempt(1);
    get.set_key("gloo/rank0");
    v1::KvGetResponse gresp;
    EXPECT_EQ(kv_->Get(&ctx, get, &gresp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }

  ExpectTheFinishedJobAndItsWorker(jobs_.get(), id);
}

TEST_F(GrpcServiceTest, FollowedLogsStreamNewLinesAsTheyArrive) {
  grpc::ClientContext rctx;
  v1::RegisterWorkerRequest reg;
  v1::Device* d = reg.add_devices();
  d->set_kind("cpu");
  v1::RegisterWorkerResponse rresp;
  ASSERT_TRUE(workers_->RegisterWorker(&rctx, reg, &rresp).ok());
  std::string id;
  ASSERT_TRUE(Submit(Spec(), &id).ok());
  std::vector<std::string> texts;
  std::thread follower([&] {
    grpc::ClientContext ctx;
    v1::GetJobLogsRequest req;
    req.set_job_id(id);
    req.set_follow(true);
    auto reader = jobs_->GetJobLogs(&ctx, req);
    v1::LogLine line;
    while (reader->Read(&line)) texts.push_back(line.text());
    EXPECT_TRUE(reader->Finish().ok());
  });
  v1::AttemptStatus st;
  st.set_job_id(id);
  st.set_attempt(1);
  st.set_phase(v1::AttemptStatus::RUNNING);
  for (int i = 0; i < 3; ++i) {
    st.clear_logs();
    st.add_logs()->set_text("line " + std::to_string(i));
    Beat(rresp.worker_id(), {st});
    absl::SleepFor(absl::Milliseconds(30));
  }
  st.set_phase(v1::AttemptStatus::EXITED);
  st.clear_logs();
  st.add_logs()->set_text("last");
  Beat(rresp.worker_id(), {st});
  follower.join();
  EXPECT_EQ(texts, (std::vector<std::string>{"line 0", "line 1", "line 2", "last"}));
}

TEST_F(GrpcServiceTest, ListJobsFiltersAndPagesAndCancelWorks) {
  std::vector<std::string> ids(5);
  for (auto& id : ids) ASSERT_TRUE(Submit(Spec(), &id).ok());  // no workers: all pending
  grpc::ClientContext cctx;
  v1::CancelJobRequest creq;
  creq.set_job_id(ids[1]);
  v1::Job cancelled;
  ASSERT_TRUE(jobs_->CancelJob(&cctx, creq, &cancelled).ok());
  EXPECT_EQ(cancelled.state(), v1::JOB_CANCELLED);

  v1::ListJobsResponse pending = List({v1::JOB_PENDING});
  ASSERT_EQ(pending.jobs_size(), 4);
  EXPECT_EQ(pending.jobs(0).id(), ids[4]);  // newest first
  EXPECT_EQ(pending.jobs(0).reason(),
            "needs 1 worker with 1 cpu device; free: no worker has a free cpu device");
  EXPECT_EQ(List({v1::JOB_CANCELLED}).jobs_size(), 1);

  std::vector<std::string> paged;
  std::string token;
  int pages = 0;
  do {
    v1::ListJobsResponse page = List({}, 2, token);
    for (const v1::Job& j : page.jobs()) paged.push_back(j.id());
    token = page.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(paged, (std::vector<std::string>{ids[4], ids[3], ids[2], ids[1], ids[0]}));

  grpc::ClientContext bctx;
  v1::ListJobsRequest bad;
  bad.add_states(v1::JOB_STATE_UNSPECIFIED);
  v1::ListJobsResponse bresp;
  EXPECT_EQ(jobs_->ListJobs(&bctx, bad, &bresp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext tctx;
  v1::ListJobsRequest badtoken;
  badtoken.set_page_token("xyz");
  EXPECT_EQ(jobs_->ListJobs(&tctx, badtoken, &bresp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext nctx;
  v1::GetJobRequest nreq;
  nreq.set_job_id("job-424242");
  v1::Job none;
  grpc::Status s = jobs_->GetJob(&nctx, nreq, &none);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("job-424242"), std::string::npos);
}

TEST_F(GrpcServiceTest, WatchEndsWhenTheClientCancels) {
  std::string id;
  ASSERT_TRUE(Submit(Spec(), &id).ok());
  grpc::ClientContext ctx;
  v1::WatchJobRequest req;
  req.set_job_id(id);
  auto reader = jobs_->WatchJob(&ctx, req);
  v1::JobEvent ev;
  ASSERT_TRUE(reader->Read(&ev));
  EXPECT_EQ(ev.job().state(), v1::JOB_PENDING);
  ctx.TryCancel();
  while (reader->Read(&ev)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server is unharmed and shuts down promptly (no stuck handler).
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(GrpcServiceTest, GarbageAndTruncatedRequestsAreRefusedAndTheServerStaysUp) {
  // Field 1 (spec) as length-delimited with a length far past the end.
  grpc::Status s =
      RawCall("/yoke.v1.Coordinator/SubmitJob", std::string("\x0a\xff\xff\xff\x0f", 5));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  // A valid request cut in half.
  v1::SubmitJobRequest req;
  *req.mutable_spec() = Spec();
  std::string bytes = req.SerializeAsString();
  s = RawCall("/yoke.v1.Coordinator/SubmitJob", bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(s.ok());
  // Random bytes at a streaming method and at the worker protocol.
  std::string noise;
  for (int i = 0; i < 257; ++i) noise.push_back(static_cast<char>((i * 167 + 13) & 0xff));
  EXPECT_FALSE(RawCall("/yoke.v1.WorkerControl/Heartbeat", noise).ok());
  EXPECT_FALSE(RawCall("/yoke.v1.Rendezvous/Get", noise).ok());
  EXPECT_EQ(RawCall("/yoke.v1.Coordinator/NoSuchMethod", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // Nothing was stored, and the server still serves.
  EXPECT_EQ(List().jobs_size(), 0);
  std::string id;
  EXPECT_TRUE(Submit(Spec(), &id).ok());
}

// grpc.health.v1.HealthCheckRequest{service: `service`} on the wire: field 1,
// length-delimited (the empty name is the empty message).
std::string HealthCheckRequest(const std::string& service) {
  if (service.empty()) return "";
  return std::string("\x0a") + static_cast<char>(service.size()) + service;
}

TEST_F(GrpcServiceTest, HealthCheckReportsServingUntilShutdown) {
  constexpr char kCheck[] = "/grpc.health.v1.Health/Check";
  // The whole server (service "") answers HealthCheckResponse{status:
  // SERVING (1)}: field 1, varint 1. NOT_SERVING would be "\x08\x02".
  std::string out = "unset";
  grpc::Status s = RawCall(kCheck, HealthCheckRequest(""), &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(out, std::string("\x08\x01", 2));
  // A service the server does not know is NOT_FOUND, not SERVING.
  out = "unset";
  s = RawCall(kCheck, HealthCheckRequest("yoke.v1.NoSuchService"), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_EQ(out, "unset");
  // A request that is not a HealthCheckRequest is refused.
  EXPECT_FALSE(RawCall(kCheck, std::string("\x0a\x7f", 2)).ok());
  // Once shut down, health checks fail instead of claiming SERVING.
  server_->Shutdown();
  s = RawCall(kCheck, HealthCheckRequest(""), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(GrpcServiceTest, ReflectionListsOurServices) {
  // ServerReflectionRequest{list_services: ""} is field 7, empty string.
  grpc::GenericStub stub(channel_);
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::Slice slice(std::string("\x3a\x00", 2));
  grpc::ByteBuffer req(&slice, 1);
  call->Write(req, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer resp;
  call->Read(&resp, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(resp.Dump(&slices).ok());
  std::string text;
  for (const grpc::Slice& s : slices)
    text.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(text.find("yoke.v1.Coordinator"), std::string::npos);
  EXPECT_NE(text.find("yoke.v1.WorkerControl"), std::string::npos);
  ctx.TryCancel();
  grpc::Status st;
  call->Finish(&st, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok)) {
    if (tag == reinterpret_cast<void*>(4)) break;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(GrpcServiceTest, SecondServerOnTheSamePortFailsCleanly) {
  ServerOptions so;
  so.listen = server_->address();
  auto second = CoordinatorServer::Start(coord_.get(), so);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace yoke::server
