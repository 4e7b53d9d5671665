// The client library and the cluster commands against a fake coordinator:
// a real gRPC server on loopback whose service logic is a small in-memory
// table, so the wire format, status codes, paging, streaming and the CLI's
// output and exit codes are tested without the real coordinator.
#include "client/client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "common/testing/file_contents.h"
#include "common/testing/temp_dir.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace yoke::client {
namespace {

class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    std::lock_guard<std::mutex> l(mu_);
    ++submits_;
    if (req->spec().training().batch_size() > 4096) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "training.batch_size: too large for this fleet");
    }
    v1::Job j;
    j.set_id(absl::StrCat("job-", next_id_++));
    *j.mutable_spec() = req->spec();
    j.set_priority(req->priority());
    j.set_state(v1::JOB_PENDING);
    j.set_create_time_ms(1000 + next_id_);
    jobs_[j.id()] = j;
    order_.insert(order_.begin(), j.id());  // newest first
    resp->set_job_id(j.id());
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest* req, v1::Job* job) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(req->job_id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("job '", req->job_id(), "' not found"));
    }
    *job = it->second;
    return grpc::Status::OK;
  }

  // Pages of two, whatever the client asks, to exercise the paging loop.
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    std::lock_guard<std::mutex> l(mu_);
    size_t start = req->page_token().empty() ? 0 : std::stoul(req->page_token());
    std::vector<std::string> matching;
    for (const auto& id : order_) {
      bool ok = req->states().empty();
      for (int s : req->states()) ok |= jobs_[id].state() == s;
      if (ok) matching.push_back(id);
    }
    for (size_t i = start; i < matching.size() && i < start + 2; ++i) {
      *resp->add_jobs() = jobs_[matching[i]];
    }
    if (start + 2 < matching.size()) resp->set_next_page_token(std::to_string(start + 2));
    return grpc::Status::OK;
  }

  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest* req,
                         v1::Job* job) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(req->job_id());
    if (it == jobs_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
    it->second.set_state(v1::JOB_CANCELLED);
    it->second.set_reason("cancelled by the user");
    *job = it->second;
    return grpc::Status::OK;
  }

  // Plays a scripted life: RUNNING with progress, an epoch, then the
  // job's stored terminal state. With `break_first_watch`, the first stream
  // ends with UNAVAILABLE after one event, as when a coordinator dies.
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobEvent>* w) override {
    v1::Job final_job;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = jobs_.find(req->job_id());
      if (it == jobs_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such job");
      final_job = it->second;
    }
    v1::JobEvent ev;
    *ev.mutable_job() = final_job;
    ev.mutable_job()->set_state(v1::JOB_RUNNING);
    auto* p = ev.mutable_job()->mutable_progress();
    p->set_epochs(1);
    p->set_steps_per_epoch(10);
    p->set_step_in_epoch(5);
    p->set_step(5);
    p->set_total_steps(10);
    w->Write(ev);
    if (break_first_watch_.exchange(false)) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator went away");
    }
    ev.mutable_job()->add_history()->set_epoch(1);
    w->Write(ev);
    *ev.mutable_job() = final_job;
    w->Write(ev);
    ++watch_streams_;
    return grpc::Status::OK;
  }

  grpc::Status GetJobLogs(grpc::ServerContext*, const v1::GetJobLogsRequest* req,
                          grpc::ServerWriter<v1::LogLine>* w) override {
    for (int i = 1; i <= 3; ++i) {
      if (i <= req->since_seq()) continue;
      v1::LogLine line;
      line.set_seq(i);
      line.set_text(absl::StrCat("line ", i));
      w->Write(line);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* resp) override {
    auto* w = resp->add_workers();
    w->set_id("w-1");
    w->set_hostname("box");
    w->set_address("10.0.0.5");
    w->set_alive(true);
    for (int i = 0; i < 2; ++i) {
      auto* d = w->add_devices();
      d->set_kind("cpu");
      d->set_cores(8);
    }
    w->set_free_cpu(1);
    w->add_running("job-1/1");
    return grpc::Status::OK;
  }

  // Test hooks.
  void SetState(const std::string& id, v1::JobState s, const std::string& reason) {
    std::lock_guard<std::mutex> l(mu_);
    jobs_[id].set_state(s);
    jobs_[id].set_reason(reason);
    if (s == v1::JOB_SUCCEEDED) jobs_[id].mutable_result()->set_test_accuracy(0.8765);
  }
  int submits() {
    std::lock_guard<std::mutex> l(mu_);
    return submits_;
  }
  std::atomic<bool> break_first_watch_{false};
  std::atomic<int> watch_streams_{0};

 private:
  std::mutex mu_;
  int next_id_ = 1;
  int submits_ = 0;
  std::map<std::string, v1::Job> jobs_;
  std::vector<std::string> order_;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&fake_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    addr_ = absl::StrCat("127.0.0.1:", port);
  }
  void TearDown() override { server_->Shutdown(); }

  // Runs a CLI command against the fake; returns {exit code, stdout, stderr}.
  struct Run {
    int code;
    std::string out, err;
  };
  Run Cmd(const std::string& cmd, std::vector<std::string> args) {
    args.push_back("--coordinator");
    args.push_back(addr_);
    args.push_back("--insecure");  // the fake serves plaintext
    FILE* out = std::tmpfile();
    FILE* err = std::tmpfile();
    Run r{RunClusterCommand(cmd, args, out, err), common::FileContents(out),
          common::FileContents(err)};
    std::fclose(out);
    std::fclose(err);
    return r;
  }
  static std::string Config(const std::string& name) {
    const char* d = std::getenv("YOKE_SOURCE_DIR");
    return std::string(d ? d : ".") + "/configs/" + name;
  }

  FakeCoordinator fake_;
  std::unique_ptr<grpc::Server> server_;
  std::string addr_;
};

TEST_F(ClientTest, SubmitGetListCancelRoundTrip) {
  CoordinatorClient c(addr_);
  v1::JobSpec spec;
  spec.set_name("first");
  auto id1 = c.SubmitJob(spec, 3);
  ASSERT_TRUE(id1.ok()) << id1.status();
  spec.set_name("second");
  auto id2 = c.SubmitJob(spec);
  ASSERT_TRUE(id2.ok());
  EXPECT_NE(*id1, *id2);

  auto job = c.GetJob(*id1);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->spec().name(), "first");
  EXPECT_EQ(job->priority(), 3);

  auto cancelled = c.CancelJob(*id2);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::JOB_CANCELLED);

  auto pending = c.ListJobs({v1::JOB_PENDING});
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->size(), 1u);
  EXPECT_EQ((*pending)[0].id(), *id1);
}

TEST_F(ClientTest, ListJobsFollowsEveryPage) {
  CoordinatorClient c(addr_);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(*c.SubmitJob(v1::JobSpec()));
  auto jobs = c.ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 5u);                                         // three pages of at most two
  for (int i = 0; i < 5; ++i) EXPECT_EQ((*jobs)[i].id(), ids[4 - i]);  // newest first
}

TEST_F(ClientTest, KeepsTheServersCodeAndMessage) {
  CoordinatorClient c(addr_);
  auto s = c.GetJob("job-404").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "job 'job-404' not found");
  v1::JobSpec spec;
  spec.mutable_training()->set_batch_size(10000);
  s = c.SubmitJob(spec).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "training.batch_size: too large for this fleet");
}

TEST(ClientUnreachableTest, SaysWhereItLookedAndHowToStartOne) {
  // A port nobody listens on: bind one, then close it.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  std::string addr = absl::StrCat("127.0.0.1:", ntohs(a.sin_port));

  ClientOptions options;
  options.unary_timeout = std::chrono::milliseconds(2000);
  CoordinatorClient c(addr, options);
  auto t0 = std::chrono::steady_clock::now();
  auto s = c.ListWorkers().status();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("cannot reach the coordinator at " + addr +
                             " (is it running? start one with `yoke up`)"),
            absl::string_view::npos)
      << s;

  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  EXPECT_EQ(RunClusterCommand("jobs", {"--coordinator", addr, "--insecure"}, out, err), 1);
  std::fclose(out);
  std::fclose(err);
}

TEST(ClientAddressTest, FlagThenEnvironmentThenDefault) {
  setenv("YOKE_STATE_DIR", "/nonexistent-yoke-state", 1);
  unsetenv("YOKE_COORDINATOR");
  EXPECT_EQ(ResolveCoordinatorAddress(""), kDefaultCoordinatorAddress);
  setenv("YOKE_COORDINATOR", "10.0.0.1:9000", 1);
  EXPECT_EQ(ResolveCoordinatorAddress(""), "10.0.0.1:9000");
  EXPECT_EQ(ResolveCoordinatorAddress("h:1"), "h:1");
  unsetenv("YOKE_COORDINATOR");
  unsetenv("YOKE_STATE_DIR");
}

TEST_F(ClientTest, SubmitCommandParsesLocallyAndLeavesValidationToTheCoordinator) {
  // A --set that does not parse never leaves the CLI.
  Run r = Cmd("submit", {Config("fashion_mnist_mlp.yaml"), "--set", "training.batch_size=abc"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("training.batch_size"), std::string::npos) << r.err;
  // A typo in the file: the error names file:line and the field path.
  common::TempDir tmp("yoke_client_test");  // removed with its files at the end
  std::string bad = tmp.File("bad.yaml");
  FILE* f = std::fopen(bad.c_str(), "w");
  std::fputs("model: {zoo: mlp}\ntraining:\n  epochs: 1\n  optimzer: {type: sgd}\n", f);
  std::fclose(f);
  r = Cmd("submit", {bad});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad.yaml:4"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("training.optimzer: unknown field"), std::string::npos) << r.err;
  EXPECT_EQ(fake_.submits(), 0);

  r = Cmd("submit", {Config("fashion_mnist_mlp.yaml"), "--output", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "{\"job_id\":\"job-1\"}\n");
  r = Cmd("submit", {Config("fashion_mnist_mlp.yaml"), "--set", "training.batch_size=5000"});
  EXPECT_EQ(r.code, 2);  // the server's INVALID_ARGUMENT
  EXPECT_NE(r.err.find("too large for this fleet"), std::string::npos) << r.err;
  EXPECT_EQ(fake_.submits(), 2);
  // A spec that parses but is invalid goes to the coordinator, which alone
  // validates it (bad_input_e2e_test checks the real coordinator's message).
  r = Cmd("submit", {Config("fashion_mnist_mlp.yaml"), "--set", "training.batch_size=-64"});
  EXPECT_EQ(fake_.submits(), 3);
}

TEST_F(ClientTest, JobsGetWorkersAndLogsCommands) {
  ASSERT_EQ(Cmd("submit", {Config("fashion_mnist_mlp.yaml")}).code, 0);
  Run r = Cmd("jobs", {"--output", "json"});
  ASSERT_EQ(r.code, 0) << r.err;
  // The output parses back as a list of Job.
  v1::ListJobsResponse parsed;
  auto s = google::protobuf::util::JsonStringToMessage("{\"jobs\":" + r.out + "}", &parsed);
  ASSERT_TRUE(s.ok()) << s.ToString() << r.out;
  ASSERT_EQ(parsed.jobs_size(), 1);
  EXPECT_EQ(parsed.jobs(0).spec().name(), "fashion-mnist-mlp");

  r = Cmd("jobs", {"--state", "running"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.find("job-1"), std::string::npos) << r.out;  // it is pending
  r = Cmd("jobs", {"--state", "bogus"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown job state 'bogus'"), std::string::npos);

  r = Cmd("get", {"job-1"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("PENDING"), std::string::npos) << r.out;
  r = Cmd("get", {"job-9"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not found"), std::string::npos) << r.err;
  r = Cmd("get", {});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("usage: yoke get ID"), std::string::npos) << r.err;

  r = Cmd("workers", {});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("w-1  box   10.0.0.5  2 cpu (1 free, 8 cores)  alive  job-1/1"),
            std::string::npos)
      << r.out;

  r = Cmd("logs", {"job-1"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "line 1\nline 2\nline 3\n");
}

// Names and reasons are other users' text. The coordinator refuses control
// bytes in names at submit, but a store may hold older ones and reasons quote
// trainers: every table and line the CLI prints shows them escaped, and a
// NUL does not end the listing (the jobs after it stay visible).
TEST_F(ClientTest, ControlBytesInNamesAndReasonsArePrintedEscaped) {
  CoordinatorClient c(addr_);
  v1::JobSpec spec;
  spec.set_name("older");
  ASSERT_TRUE(c.SubmitJob(spec).ok());
  const std::string hostile("innocent\x1b]0;owned\a\x1b[2J\x1b[H\0hidden", 32);
  spec.set_name(hostile);
  ASSERT_TRUE(c.SubmitJob(spec).ok());
  fake_.SetState("job-2", v1::JOB_FAILED, "bad layer '\x1b[31mred\x1b[0m'\n\xc2\x9b");

  for (const auto& [cmd, args] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"jobs", {}}, {"get", {"job-2"}}, {"watch", {"job-2"}}}) {
    Run r = Cmd(cmd, args);
    const std::string printed = r.out + r.err;
    for (char ctl : {'\x1b', '\a', '\0'}) {
      EXPECT_EQ(printed.find(ctl), std::string::npos) << cmd << ": " << printed;
    }
    EXPECT_NE(printed.find("\\x1b[31mred"), std::string::npos) << cmd << ": " << printed;
  }
  Run r = Cmd("jobs", {});
  EXPECT_NE(r.out.find("innocent\\x1b]0;owned\\x07\\x1b[2J"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("older"), std::string::npos) << r.out;  // listed after the NUL
  r = Cmd("get", {"job-2"});
  EXPECT_NE(r.out.find("\\x00hidden"), std::string::npos) << r.out;
}

TEST_F(ClientTest, FlagsTakeBothFormsAndRepeatedSetsAccumulate) {
  Run r = Cmd("submit", {Config("fashion_mnist_mlp.yaml"), "--priority=7",
                         "--set=training.epochs=3", "--set", "training.batch_size=32"});
  ASSERT_EQ(r.code, 0) << r.err;
  r = Cmd("get", {"--output=json", "job-1"});
  ASSERT_EQ(r.code, 0) << r.err;
  v1::Job j;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &j).ok()) << r.out;
  EXPECT_EQ(j.priority(), 7);
  EXPECT_EQ(j.spec().training().epochs(), 3);
  EXPECT_EQ(j.spec().training().batch_size(), 32);
}

TEST_F(ClientTest, EveryCommandTakesHelpAndOnlyItsOwnFlags) {
  for (const std::string cmd : {"submit", "jobs", "get", "watch", "logs", "cancel", "workers"}) {
    Run r = Cmd(cmd, {"--help"});
    EXPECT_EQ(r.code, 0) << cmd << r.err;
    EXPECT_EQ(r.out.rfind("usage: yoke " + cmd, 0), 0u) << r.out;
    EXPECT_EQ(r.err, "");
  }
  // --watch belongs to submit, --follow to logs.
  Run r = Cmd("get", {"job-1", "--watch"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("yoke get: unknown flag '--watch'\nusage: yoke get ID", 0), 0u) << r.err;
  r = Cmd("cancel", {"job-1", "-f"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("yoke cancel: unknown flag '-f'"), std::string::npos) << r.err;
  r = Cmd("jobs", {"--priority", "3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("yoke jobs: unknown flag '--priority'"), std::string::npos) << r.err;
}

TEST_F(ClientTest, WatchExitsZeroOnSuccessAndOneWithTheReasonOtherwise) {
  ASSERT_EQ(Cmd("submit", {Config("fashion_mnist_mlp.yaml")}).code, 0);
  ASSERT_EQ(Cmd("submit", {Config("fashion_mnist_mlp.yaml")}).code, 0);
  fake_.SetState("job-1", v1::JOB_SUCCEEDED, "");
  fake_.SetState("job-2", v1::JOB_FAILED, "trainer exited with status 1: loss diverged");

  Run r = Cmd("watch", {"job-1"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("job-1 RUNNING"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("test accuracy 0.8765"), std::string::npos) << r.out;

  r = Cmd("watch", {"job-2"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("job-2 FAILED: trainer exited with status 1: loss diverged"),
            std::string::npos)
      << r.err;

  r = Cmd("watch", {"job-3"});
  EXPECT_EQ(r.code, 2);

  r = Cmd("watch", {"job-1", "--output", "json"});
  EXPECT_EQ(r.code, 0);
  v1::Job j;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &j).ok()) << r.out;
  EXPECT_EQ(j.state(), v1::JOB_SUCCEEDED);
}

TEST_F(ClientTest, WatchReconnectsWhenTheStreamBreaks) {
  ASSERT_EQ(Cmd("submit", {Config("fashion_mnist_mlp.yaml")}).code, 0);
  fake_.SetState("job-1", v1::JOB_SUCCEEDED, "");
  fake_.break_first_watch_ = true;
  Run r = Cmd("watch", {"job-1"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("reconnecting"), std::string::npos) << r.out;
  EXPECT_EQ(fake_.watch_streams_, 1);  // the second stream ran to the end
}

}  // namespace
}  // namespace yoke::client
