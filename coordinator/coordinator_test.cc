// The Coordinator class through its public API, with a fake clock: submit,
// scheduling, heartbeats and attempts, restarts, rendezvous and the store.
// Over 600 lines because its 23 tests share one fixture (a coordinator, its
// store and simulated workers); it mirrors coordinator/coordinator.cc.
#include "coordinator/coordinator.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "config/config.h"
#include "coordinator/coordinator_metrics.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec_binary.h"
#include "security/sha256.h"

namespace yoke::server {
namespace {

constexpr char kSpec[] = R"(
name: t
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

v1::RegisterWorkerRequest Reg(int cpus, const std::string& id = "") {
  v1::RegisterWorkerRequest r;
  r.set_hostname("host");
  r.set_worker_id(id);
  for (int i = 0; i < cpus; ++i) {
    v1::Device* d = r.add_devices();
    d->set_kind("cpu");
    d->set_index(i);
  }
  return r;
}

v1::AttemptStatus Status(const std::string& job, int attempt, v1::AttemptStatus::Phase phase) {
  v1::AttemptStatus s;
  s.set_job_id(job);
  s.set_attempt(attempt);
  s.set_phase(phase);
  return s;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  // A fresh coordinator over the same store: what a process restart does.
  void Restart() {
    coord_.reset();
    CoordinatorOptions o;
    o.data_roots = data_roots_;
    o.metrics = &metrics_;
    auto c = Coordinator::Create(&store_, &clock_, o);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
  }

  std::string Register(int cpus, const std::string& id = "") {
    auto r = coord_->RegisterWorker(Reg(cpus, id));
    EXPECT_TRUE(r.ok()) << r.status();
    return r->worker_id();
  }

  v1::HeartbeatResponse Beat(const std::string& worker, std::vector<v1::AttemptStatus> st = {}) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    for (auto& s : st) *req.add_attempts() = s;
    auto r = coord_->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatResponse();
  }

  v1::Job Job(const std::string& id) {
    auto j = coord_->Get(id);
    EXPECT_TRUE(j.ok()) << j.status();
    return *j;
  }

  common::FakeClock clock_;
  CoordinatorMetrics metrics_;
  InMemoryJobStore store_;
  std::vector<std::string> data_roots_;
  std::unique_ptr<Coordinator> coord_;
};

TEST_F(CoordinatorTest, BadSpecsAreRejectedNamingTheFieldAndNothingIsStored) {
  auto bad = coord_->Submit(Spec({"training.batch_size=-4"}), 0);
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("training.batch_size"), std::string::npos);

  data_roots_ = {"/data"};
  Restart();
  v1::JobSpec outside = Spec();
  v1::DatasetSpec* train = outside.mutable_data()->mutable_train();
  train->Clear();
  train->set_format("idx");
  train->set_images("/data/../etc/passwd");
  train->set_labels("/data/labels");
  auto rejected = coord_->Submit(outside, 0);
  ASSERT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument) << rejected.status();
  EXPECT_NE(rejected.status().message().find("data.train.images"), std::string::npos)
      << rejected.status();
  EXPECT_TRUE(coord_->List(JobListQuery())->jobs.empty());
  EXPECT_EQ(store_.writes(), 0);
}

// An image folder the coordinator can see is checked at submit, with the
// trainer's message naming the folder; one it cannot see is left to the
// trainer.
TEST_F(CoordinatorTest, AnEmptyClassFolderItCanSeeIsRefusedAtSubmit) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(::testing::TempDir()) / "coordinator_image_folder";
  fs::remove_all(root);
  fs::create_directories(root / "cat");
  fs::create_directories(root / "dog");
  std::ofstream(root / "cat" / "1.png") << "listed only, never decoded";
  std::ofstream(root / "dog" / "notes.txt") << "no image";
  v1::JobSpec spec = Spec();
  v1::DatasetSpec* train = spec.mutable_data()->mutable_train();
  train->Clear();
  train->set_format("image_folder");
  train->set_root(root.string());
  train->add_image_size(4);
  train->add_image_size(4);
  auto refused = coord_->Submit(spec, 0);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("data.train: " + (root / "dog").string() +
                                            ": class folder 'dog' holds no .jpg"),
            std::string::npos)
      << refused.status();
  EXPECT_TRUE(coord_->List(JobListQuery())->jobs.empty());

  std::ofstream(root / "dog" / "2.JPG") << "x";
  EXPECT_TRUE(coord_->Submit(spec, 0).ok());
  // A root this machine does not have: the workers' business.
  train->set_root((root / "only-on-the-workers").string());
  EXPECT_TRUE(coord_->Submit(spec, 0).ok());
  fs::remove_all(root);
}

TEST_F(CoordinatorTest, JobThatCanNeverFitIsRefusedButAnEmptyFleetAccepts) {
  // No workers yet: accepted, pending with a reason.
  auto early = coord_->Submit(Spec({"distribution.workers=2"}), 0);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(Job(*early).state(), v1::JOB_PENDING);
  EXPECT_EQ(Job(*early).reason(),
            "needs 2 workers with 1 cpu device each; free: no worker has a free cpu device");
  Register(4);
  auto never = coord_->Submit(Spec({"distribution.devices_per_worker=5"}), 0);
  ASSERT_EQ(never.status().code(), absl::StatusCode::kFailedPrecondition) << never.status();
  EXPECT_NE(never.status().message().find("needs 1 worker with 5 cpu devices"), std::string::npos)
      << never.status();
}

TEST_F(CoordinatorTest, FullLifecycleToSucceeded) {
  const std::string w = Register(1);
  EXPECT_EQ(w, "w-1");
  auto id = coord_->Submit(Spec(), 0);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "job-000001");
  EXPECT_EQ(Job(*id).state(), v1::JOB_SCHEDULED);

  v1::HeartbeatResponse r = Beat(w);
  ASSERT_EQ(r.desired_size(), 1);
  const v1::DesiredAttempt& d = r.desired(0);
  EXPECT_EQ(d.job_id(), *id);
  EXPECT_EQ(d.attempt(), 1);
  EXPECT_EQ(d.world_size(), 1);
  EXPECT_EQ(d.first_rank(), 0);
  ASSERT_EQ(d.devices_size(), 1);
  EXPECT_EQ(d.devices(0), 0);
  EXPECT_EQ(d.spec().name(), "t");
  EXPECT_TRUE(coord_->rendezvous()->Put(*id, 1, "k", "v").ok());  // namespace open

  v1::AttemptStatus running = Status(*id, 1, v1::AttemptStatus::RUNNING);
  running.mutable_progress()->set_step(5);
  running.add_logs()->set_text("epoch 1 step 5");
  running.add_logs()->set_text("loss 0.5");
  Beat(w, {running});
  v1::Job j = Job(*id);
  EXPECT_EQ(j.state(), v1::JOB_RUNNING);
  EXPECT_EQ(j.attempts(0).state(), v1::ATTEMPT_RUNNING);
  EXPECT_EQ(j.progress().step(), 5);
  auto logs = coord_->ReadLogs(*id, 0, 10);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 2u);
  EXPECT_EQ((*logs)[1].seq(), 2);
  EXPECT_EQ((*logs)[1].text(), "loss 0.5");
  EXPECT_EQ((*logs)[1].worker_id(), "w-1");
  EXPECT_EQ((*logs)[1].attempt(), 1);

  v1::AttemptStatus done = Status(*id, 1, v1::AttemptStatus::EXITED);
  done.set_exit_code(0);
  done.mutable_result()->set_test_accuracy(0.875);
  v1::EpochResult* e = done.add_epochs();
  e->set_epoch(1);
  e->set_test_accuracy(0.875);
  r = Beat(w, {done});
  EXPECT_EQ(r.desired_size(), 0);  // recorded: the worker may forget it
  j = Job(*id);
  EXPECT_EQ(j.state(), v1::JOB_SUCCEEDED);
  EXPECT_DOUBLE_EQ(j.result().test_accuracy(), 0.875);
  ASSERT_EQ(j.history_size(), 1);
  EXPECT_EQ(j.attempts(0).state(), v1::ATTEMPT_SUCCEEDED);
  EXPECT_GT(j.end_time_ms(), 0);
  // The stored copy is the final one, and the rendezvous namespace is gone.
  EXPECT_EQ(store_.Get(*id)->state(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(coord_->rendezvous()->num_namespaces(), 0);
  // A second job now gets the freed device.
  auto next = coord_->Submit(Spec(), 0);
  EXPECT_EQ(Job(*next).state(), v1::JOB_SCHEDULED);
}

TEST_F(CoordinatorTest, SpecGoesOutUntilTheWorkerListsTheAttemptThenOnlyItsDigest) {
  const std::string w = Register(1);
  auto id = coord_->Submit(Spec({"name=digest-me"}), 0);
  ASSERT_TRUE(id.ok()) << id.status();
  // Handed out: the spec, and the SHA-256 of its bytes.
  v1::HeartbeatResponse first = Beat(w);
  ASSERT_EQ(first.desired_size(), 1);
  ASSERT_TRUE(first.desired(0).has_spec());
  EXPECT_EQ(first.desired(0).spec().name(), "digest-me");
  const std::string digest = first.desired(0).spec_digest();
  EXPECT_EQ(digest.size(), 32u);
  EXPECT_EQ(digest, common::Sha256(first.desired(0).spec().SerializeAsString()));
  // Not listed yet (the reply was lost): the spec goes out again.
  v1::HeartbeatResponse second = Beat(w);
  ASSERT_EQ(second.desired_size(), 1);
  EXPECT_EQ(second.desired(0).spec().name(), "digest-me");
  // Listed, in any phase: identity and digest, no spec.
  for (auto phase : {v1::AttemptStatus::STARTING, v1::AttemptStatus::RUNNING}) {
    v1::HeartbeatResponse r = Beat(w, {Status(*id, 1, phase)});
    ASSERT_EQ(r.desired_size(), 1);
    EXPECT_EQ(r.desired(0).job_id(), *id);
    EXPECT_EQ(r.desired(0).attempt(), 1);
    EXPECT_FALSE(r.desired(0).has_spec()) << r.desired(0).spec().name();
    EXPECT_EQ(r.desired(0).spec_digest(), digest);
    EXPECT_EQ(r.desired(0).world_size(), 1);
    ASSERT_EQ(r.desired(0).devices_size(), 1);
  }
  // After a restart the worker registers again listing the attempt: its
  // heartbeats still get no spec, and the digest of the reloaded spec.
  Restart();
  v1::RegisterWorkerRequest again = Reg(1, w);
  *again.add_attempts() = Status(*id, 1, v1::AttemptStatus::RUNNING);
  ASSERT_TRUE(coord_->RegisterWorker(again).ok());
  v1::HeartbeatResponse after = Beat(w, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
  ASSERT_EQ(after.desired_size(), 1);
  EXPECT_FALSE(after.desired(0).has_spec());
  EXPECT_EQ(after.desired(0).spec_digest(), digest);
}

TEST_F(CoordinatorTest, GangWaitsForAllWorkersAndReportsWhy) {
  const std::string w1 = Register(1);
  const std::string w2 = Register(1);
  auto small = coord_->Submit(Spec(), 0);  // takes w-1
  auto id = coord_->Submit(Spec({"distribution.workers=2"}), 0);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(Job(*id).reason(),
            "needs 2 workers with 1 cpu device each; free: 1 worker (w-2: 1 cpu)");
  EXPECT_EQ(Beat(w2).desired_size(), 0);
  Beat(w1, {Status(*small, 1, v1::AttemptStatus::EXITED)});
  v1::HeartbeatResponse r1 = Beat(w1);
  v1::HeartbeatResponse r2 = Beat(w2);
  ASSERT_EQ(r1.desired_size(), 1);
  ASSERT_EQ(r2.desired_size(), 1);
  EXPECT_EQ(r1.desired(0).job_id(), *id);
  EXPECT_EQ(r1.desired(0).first_rank(), 0);
  EXPECT_EQ(r2.desired(0).first_rank(), 1);
  EXPECT_EQ(r2.desired(0).world_size(), 2);
  // RUNNING only once both shares reported in.
  Beat(w1, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
  EXPECT_EQ(Job(*id).state(), v1::JOB_SCHEDULED);
  Beat(w2, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
  EXPECT_EQ(Job(*id).state(), v1::JOB_RUNNING);
  // One share exiting 0 is not the end; both are.
  Beat(w2, {Status(*id, 1, v1::AttemptStatus::EXITED)});
  EXPECT_EQ(Job(*id).state(), v1::JOB_RUNNING);
  v1::AttemptStatus rank0 = Status(*id, 1, v1::AttemptStatus::EXITED);
  rank0.mutable_result()->set_steps(42);
  Beat(w1, {rank0});
  EXPECT_EQ(Job(*id).state(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(Job(*id).result().steps(), 42);
}

// ---- multi-worker attempts (issue 4)

class MultiWorkerTest : public CoordinatorTest {
 protected:
  // Two 1-cpu workers and a job over both, each share reported RUNNING.
  void StartTwoRanks(const std::vector<std::string>& overrides = {}) {
    w1_ = Register(1);
    w2_ = Register(1);
    std::vector<std::string> o = {"distribution.workers=2"};
    o.insert(o.end(), overrides.begin(), overrides.end());
    auto id = coord_->Submit(Spec(o), 0);
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
    Beat(w1_, {Status(id_, 1, v1::AttemptStatus::RUNNING)});
    Beat(w2_, {Status(id_, 1, v1::AttemptStatus::RUNNING)});
    ASSERT_EQ(Job(id_).state(), v1::JOB_RUNNING);
  }

  v1::AttemptStatus Exit(int attempt, int code, const std::string& reason) {
    v1::AttemptStatus st = Status(id_, attempt, v1::AttemptStatus::EXITED);
    st.set_exit_code(code);
    st.set_reason(reason);
    return st;
  }

  v1::AttemptStatus Progress(int attempt, int64_t step, int64_t completed) {
    v1::AttemptStatus st = Status(id_, attempt, v1::AttemptStatus::RUNNING);
    st.mutable_progress()->set_step(step);
    st.mutable_progress()->set_collective_seq_issued(completed + 1);
    st.mutable_progress()->set_collective_seq_completed(completed);
    return st;
  }

  std::string w1_, w2_, id_;
};

TEST_F(MultiWorkerTest, OneRankFailingStopsTheOthersAndFailsTheJobWithItsRank) {
  StartTwoRanks({"restart.max_restarts=0"});  // no retry: the first failure is final
  EXPECT_EQ(Beat(w1_).desired_size(), 1);
  Beat(w2_, {Exit(1, 128 + 9, "killed by signal 9 (Killed); last output: step 20")});
  v1::Job j = Job(id_);
  EXPECT_EQ(j.state(), v1::JOB_FAILED);
  EXPECT_EQ(j.reason(),
            "trainer of rank 1 on w-2 killed by signal 9 (Killed); last output: step 20");
  EXPECT_EQ(j.attempts(0).state(), v1::ATTEMPT_FAILED);
  // Rank 0's worker no longer has the attempt in its desired state, so it
  // stops its trainer; whatever that trainer reports next changes nothing.
  EXPECT_EQ(Beat(w1_, {Status(id_, 1, v1::AttemptStatus::RUNNING)}).desired_size(), 0);
  Beat(w1_, {Exit(1, 128 + 15, "stopped: no longer desired by the coordinator")});
  EXPECT_EQ(Job(id_).reason(),
            "trainer of rank 1 on w-2 killed by signal 9 (Killed); last output: step 20");
}

TEST_F(MultiWorkerTest, FailedRankRestartsTheGangInAFreshRendezvousNamespace) {
  StartTwoRanks({"restart.max_restarts=1"});
  auto* rdv = coord_->rendezvous();
  ASSERT_TRUE(rdv->Put(id_, 1, "gloo/rank0", "127.0.0.1:4000").ok());
  EXPECT_EQ(*rdv->Get(id_, 1, "gloo/rank0", absl::ZeroDuration()), "127.0.0.1:4000");
  // Another attempt's namespace is not open: no trainer of it can meet ours.
  EXPECT_EQ(rdv->Put(id_, 2, "k", "v").code(), absl::StatusCode::kFailedPrecondition);

  Beat(w1_, {Exit(1, 1, "loss is NaN at step 17")});
  v1::Job j = Job(id_);
  EXPECT_EQ(j.state(), v1::JOB_PENDING);
  EXPECT_EQ(j.attempts(0).reason(),
            "trainer of rank 0 on w-1 exited with code 1: loss is NaN at step 17");
  // The failed attempt's keys are gone with it.
  EXPECT_EQ(rdv->Get(id_, 1, "gloo/rank0", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rdv->num_namespaces(), 0);
  // Rank 1's trainer is still stopping: its device stays held, and the gang
  // does not start again until it is gone.
  EXPECT_EQ(Beat(w2_, {Status(id_, 1, v1::AttemptStatus::RUNNING)}).desired_size(), 0);
  EXPECT_EQ(Job(id_).state(), v1::JOB_PENDING);
  v1::HeartbeatResponse r2 = Beat(w2_, {Exit(1, 128 + 15, "")});
  v1::HeartbeatResponse r1 = Beat(w1_);
  ASSERT_EQ(r1.desired_size(), 1);
  ASSERT_EQ(r2.desired_size(), 1);
  EXPECT_EQ(r1.desired(0).attempt(), 2);
  EXPECT_EQ(r2.desired(0).attempt(), 2);
  EXPECT_EQ(r1.desired(0).first_rank() + r2.desired(0).first_rank(), 1);
  EXPECT_EQ(Job(id_).state(), v1::JOB_SCHEDULED);
  // Attempt 2 starts with an empty namespace.
  EXPECT_EQ(rdv->num_namespaces(), 1);
  EXPECT_EQ(rdv->Get(id_, 2, "gloo/rank0", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // Finishing drops it.
  Beat(w1_, {Status(id_, 2, v1::AttemptStatus::EXITED)});
  Beat(w2_, {Status(id_, 2, v1::AttemptStatus::EXITED)});
  EXPECT_EQ(Job(id_).state(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(rdv->num_namespaces(), 0);
}

// The exposition's value of `series` (a full name with labels), or -1.
double Metric(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

TEST_F(MultiWorkerTest, MetricsCountSchedulingRestartsRecoveryAndGoodput) {
  w1_ = Register(1);
  w2_ = Register(1);
  auto id = coord_->Submit(Spec({"distribution.workers=2", "restart.max_restarts=1"}), 0);
  ASSERT_TRUE(id.ok()) << id.status();
  id_ = *id;
  clock_.Advance(absl::Seconds(3));  // the trainers take 3 s to start
  Beat(w1_, {Status(id_, 1, v1::AttemptStatus::RUNNING)});
  Beat(w2_, {Status(id_, 1, v1::AttemptStatus::RUNNING)});
  ASSERT_EQ(Job(id_).state(), v1::JOB_RUNNING);
  CoordinatorView view;
  view.job_counts = [this] { return coord_->CountJobsByState(); };
  view.workers = [this] { return coord_->ListWorkers(); };
  view.running_jobs = [this] { return coord_->RunningJobs(); };
  view.now_ms = [this] { return clock_.NowMs(); };
  // Rank 0 has done 100 steps of 50 ms, 13 s after the attempt was
  // scheduled (its trainers took 3 s to start): 5 of 13 s in committed steps.
  clock_.Advance(absl::Seconds(10));
  v1::AttemptStatus p = Progress(1, 100, 0);
  p.mutable_progress()->set_window_steps(10);
  p.mutable_progress()->set_step_seconds(0.5);
  Beat(w1_, {p});
  std::string text = "\n" + metrics_.Exposition(view);
  EXPECT_EQ(Metric(text, "yoke_job_submissions_total"), 1);
  EXPECT_EQ(Metric(text, "yoke_jobs{state=\"running\"}"), 1);
  EXPECT_EQ(Metric(text, "yoke_jobs{state=\"pending\"}"), 0);
  EXPECT_EQ(Metric(text, "yoke_workers{state=\"busy\"}"), 2);
  EXPECT_EQ(Metric(text, "yoke_scheduling_latency_seconds_count"), 1);
  EXPECT_NEAR(Metric(text, "yoke_scheduling_latency_seconds_sum"), 3.0, 1e-9);
  EXPECT_NEAR(Metric(text, "yoke_goodput_ratio{job=\"" + id_ + "\"}"), 5.0 / 13, 1e-9) << text;

  // Rank 1 fails; the retry's first step comes 7 s later.
  Beat(w2_, {Exit(1, 1, "loss is NaN")});
  Beat(w1_, {Exit(1, 128 + 15, "")});
  clock_.Advance(absl::Seconds(7));
  Beat(w1_);
  Beat(w2_);
  Beat(w1_, {Status(id_, 2, v1::AttemptStatus::RUNNING)});
  Beat(w2_, {Status(id_, 2, v1::AttemptStatus::RUNNING)});
  ASSERT_EQ(Job(id_).attempts_size(), 2);
  v1::AttemptStatus q = Progress(2, 110, 0);
  q.mutable_progress()->set_window_steps(10);
  q.mutable_progress()->set_step_seconds(0.5);
  const bool rank0_on_w1 = Job(id_).attempts(1).assignments(0).worker_id() == w1_;
  Beat(rank0_on_w1 ? w1_ : w2_, {q});
  text = "\n" + metrics_.Exposition(view);
  EXPECT_EQ(Metric(text, "yoke_restarts_total"), 1);
  EXPECT_EQ(Metric(text, "yoke_recovery_seconds_count"), 1);
  EXPECT_NEAR(Metric(text, "yoke_recovery_seconds_sum"), 7.0, 1e-9);
  // Scheduling latency counts a job's first attempt only.
  EXPECT_EQ(Metric(text, "yoke_scheduling_latency_seconds_count"), 1);

  // Once the job ends its goodput series is gone.
  Beat(w1_, {Status(id_, 2, v1::AttemptStatus::EXITED)});
  Beat(w2_, {Status(id_, 2, v1::AttemptStatus::EXITED)});
  ASSERT_EQ(Job(id_).state(), v1::JOB_SUCCEEDED);
  text = "\n" + metrics_.Exposition(view);
  EXPECT_EQ(text.find("yoke_goodput_ratio{"), std::string::npos) << text;
  EXPECT_EQ(Metric(text, "yoke_jobs{state=\"succeeded\"}"), 1);
  EXPECT_EQ(Metric(text, "yoke_workers{state=\"idle\"}"), 2);
}

TEST_F(MultiWorkerTest, LostWorkerFailsTheAttemptNamingItsRank) {
  StartTwoRanks({"restart.max_restarts=0"});  // no retry: the first failure is final
  clock_.Advance(absl::Seconds(6));
  Beat(w1_, {Status(id_, 1, v1::AttemptStatus::RUNNING)});
  clock_.Advance(absl::Seconds(5));
  coord_->Tick();
  v1::Job j = Job(id_);
  EXPECT_EQ(j.state(), v1::JOB_FAILED);
  EXPECT_EQ(j.reason(), "worker w-2 missed heartbeats for 10s (it ran rank 1 of 2)");
  EXPECT_EQ(Beat(w1_, {Status(id_, 1, v1::AttemptStatus::RUNNING)}).desired_size(), 0);
}

TEST_F(MultiWorkerTest, EveryEpochIsInTheHistoryOnceAcrossRestarts) {
  StartTwoRanks({"restart.max_restarts=2"});
  auto epochs = [&](int attempt, std::vector<std::pair<int, double>> es) {
    v1::AttemptStatus st = Status(id_, attempt, v1::AttemptStatus::RUNNING);
    for (auto [n, acc] : es) {
      v1::EpochResult* e = st.add_epochs();
      e->set_epoch(n);
      e->set_test_accuracy(acc);
    }
    return st;
  };
  Beat(w1_, {epochs(1, {{1, 0.5}, {2, 0.6}})});
  // Attempt 1 dies in epoch 3; attempt 2 resumes from a checkpoint inside
  // epoch 2, so it trains and reports epoch 2 again.
  Beat(w1_, {Exit(1, 1, "loss is NaN")});
  Beat(w2_, {Exit(1, 128 + 15, "")});
  ASSERT_EQ(Beat(w1_).desired_size(), 1);
  ASSERT_EQ(Beat(w2_).desired_size(), 1);
  const int rank0_worker_is_w1 = Beat(w1_).desired(0).first_rank() == 0;
  const std::string& rank0 = rank0_worker_is_w1 ? w1_ : w2_;
  Beat(rank0, {epochs(2, {{2, 0.7}, {3, 0.8}})});
  v1::Job j = Job(id_);
  ASSERT_EQ(j.history_size(), 3) << j.DebugString();
  EXPECT_EQ(j.history(0).epoch(), 1);
  EXPECT_EQ(j.history(1).epoch(), 2);
  EXPECT_DOUBLE_EQ(j.history(1).test_accuracy(), 0.7) << "the epoch as the last attempt trained it";
  EXPECT_EQ(j.history(2).epoch(), 3);
}

TEST_F(MultiWorkerTest, AnUnsetRestartPolicyRetriesThreeTimes) {
  StartTwoRanks();
  for (int attempt = 1; attempt <= 4; ++attempt) {
    ASSERT_EQ(Job(id_).attempts_size(), attempt);
    Beat(w1_, {Exit(attempt, 1, "loss is NaN")});
    Beat(w2_, {Exit(attempt, 128 + 15, "")});
    Beat(w1_);
    Beat(w2_);
  }
  v1::Job j = Job(id_);
  EXPECT_EQ(j.state(), v1::JOB_FAILED);
  EXPECT_EQ(j.attempts_size(), 4) << "the first attempt and 3 restarts";
  EXPECT_NE(j.reason().find("after 3 restarts of 3"), std::string::npos) << j.reason();
}

TEST_F(MultiWorkerTest, ResultProgressAndHistoryComeFromRankZero) {
  StartTwoRanks();
  Beat(w2_, {Progress(1, 99, 5)});
  EXPECT_EQ(Job(id_).progress().step(), 0) << "rank 1's progress is not the job's";
  Beat(w1_, {Progress(1, 40, 5)});
  EXPECT_EQ(Job(id_).progress().step(), 40);

  v1::AttemptStatus e1 = Status(id_, 1, v1::AttemptStatus::RUNNING);
  e1.add_epochs()->set_epoch(1);
  e1.mutable_epochs(0)->set_test_accuracy(0.5);
  Beat(w2_, {e1});
  e1.mutable_epochs(0)->set_test_accuracy(0.8);
  Beat(w1_, {e1});
  ASSERT_EQ(Job(id_).history_size(), 1);
  EXPECT_DOUBLE_EQ(Job(id_).history(0).test_accuracy(), 0.8);

  // Rank 0 finishes first; rank 1's later result does not replace it.
  v1::AttemptStatus done0 = Status(id_, 1, v1::AttemptStatus::EXITED);
  done0.mutable_result()->set_test_accuracy(0.8);
  done0.mutable_result()->set_steps(938);
  Beat(w1_, {done0});
  v1::AttemptStatus done1 = Status(id_, 1, v1::AttemptStatus::EXITED);
  done1.mutable_result()->set_test_accuracy(0.1);
  Beat(w2_, {done1});
  v1::Job j = Job(id_);
  EXPECT_EQ(j.state(), v1::JOB_SUCCEEDED);
  EXPECT_DOUBLE_EQ(j.result().test_accuracy(), 0.8);
  EXPECT_EQ(j.result().steps(), 938);
}

TEST_F(MultiWorkerTest, CollectiveTimeoutNamesTheLaggingRanksWorkerAndEveryRanksProgress) {
  StartTwoRanks({"restart.max_restarts=0"});  // no retry: the first failure is final
  Beat(w1_, {Progress(1, 600, 1233)});
  Beat(w2_, {Progress(1, 590, 1199)});
  // Rank 0's watchdog gives up on rank 1; the exit carries its last progress.
  v1::AttemptStatus st = Exit(
      1, 1, "allreduce #1234 (bucket 3) timed out after 30s on rank 0 of 2: rank 1 never arrived");
  *st.mutable_progress() = Progress(1, 600, 1233).progress();
  Beat(w1_, {st});
  v1::Job j = Job(id_);
  EXPECT_EQ(j.state(), v1::JOB_FAILED);
  EXPECT_EQ(j.reason(),
            "trainer of rank 0 on w-1 exited with code 1: allreduce #1234 (bucket 3) timed out "
            "after 30s on rank 0 of 2: rank 1 never arrived (worker w-2); last collective "
            "completed per rank: r0=1233 r1=1199");
  EXPECT_EQ(j.attempts(0).reason(), j.reason());
  // Neither worker runs the attempt any more.
  EXPECT_EQ(Beat(w2_, {Status(id_, 1, v1::AttemptStatus::RUNNING)}).desired_size(), 0);
}

TEST_F(CoordinatorTest, DrainingWorkerGetsNoNewAttempts) {
  const std::string w1 = Register(1);
  const std::string w2 = Register(1);
  v1::HeartbeatRequest drain;
  drain.set_worker_id(w1);
  drain.set_draining(true);
  ASSERT_TRUE(coord_->Heartbeat(drain).ok());
  auto id = coord_->Submit(Spec(), 0);
  ASSERT_TRUE(id.ok()) << id.status();
  // The job lands on w-2, never on the draining w-1.
  EXPECT_EQ(Beat(w1).desired_size(), 0);
  v1::HeartbeatResponse r2 = Beat(w2);
  ASSERT_EQ(r2.desired_size(), 1);
  EXPECT_EQ(r2.desired(0).job_id(), *id);
  // A second job waits: w-1 does not count as free.
  auto second = coord_->Submit(Spec(), 0);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Job(*second).state(), v1::JOB_PENDING);
  EXPECT_EQ(Beat(w1).desired_size(), 0);
  // Registering again (the worker came back) makes it eligible.
  Register(1, w1);
  EXPECT_EQ(Beat(w1).desired_size(), 1);
}

TEST_F(CoordinatorTest, AJobNoWorkerHasTheMemoryForIsRefusedNamingTheLayer) {
  v1::RegisterWorkerRequest reg = Reg(2);
  for (v1::Device& d : *reg.mutable_devices()) d.set_memory_bytes(int64_t{8} << 30);
  ASSERT_TRUE(coord_->RegisterWorker(reg).ok());
  auto huge = coord_->Submit(
      Spec({"model={layers: [{dense: {units: 1000000000}}, {dense: {units: 100}, name: out}]}"}),
      0);
  ASSERT_EQ(huge.status().code(), absl::StatusCode::kFailedPrecondition) << huge.status();
  const std::string msg(huge.status().message());
  EXPECT_NE(msg.find("the largest worker has 8.0 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.layers[1] (out) alone needs"), std::string::npos) << msg;
  // Two replicas per worker share its memory: a job that fits once may not twice.
  const std::string half = "model={layers: [{dense: {units: 60000000}}]}";
  EXPECT_TRUE(coord_->Submit(Spec({half}), 0).ok());
  auto two = coord_->Submit(
      Spec({half, "distribution.devices_per_worker=2", "training.batch_size=16"}), 0);
  EXPECT_EQ(two.status().code(), absl::StatusCode::kFailedPrecondition) << two.status();
  EXPECT_TRUE(coord_->Submit(Spec(), 0).ok()) << "an ordinary job is unaffected";
}

TEST_F(CoordinatorTest, TrainerFailureFailsTheJobWithItsReason) {
  const std::string w = Register(1);
  auto id = coord_->Submit(Spec(), 0);
  Beat(w, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
  v1::AttemptStatus bad = Status(*id, 1, v1::AttemptStatus::EXITED);
  bad.set_exit_code(2);
  bad.set_reason("data.train.images: file not found");
  Beat(w, {bad});
  v1::Job j = Job(*id);
  EXPECT_EQ(j.state(), v1::JOB_FAILED);
  EXPECT_EQ(j.reason(), "trainer on w-1 exited with code 2: data.train.images: file not found");
  EXPECT_EQ(j.attempts(0).state(), v1::ATTEMPT_FAILED);
}

TEST_F(CoordinatorTest, CancelStopsTheTrainerAndHoldsDevicesUntilItIsGone) {
  const std::string w = Register(1);
  auto a = coord_->Submit(Spec(), 0);
  auto b = coord_->Submit(Spec(), 0);
  EXPECT_EQ(Job(*b).state(), v1::JOB_PENDING);
  Beat(w, {Status(*a, 1, v1::AttemptStatus::RUNNING)});
  auto cancelled = coord_->Cancel(*a);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::JOB_CANCELLED);
  EXPECT_EQ(cancelled->attempts(0).state(), v1::ATTEMPT_CANCELLED);
  EXPECT_EQ(store_.Get(*a)->state(), v1::JOB_CANCELLED);
  // Still running on the worker: not desired any more, and b must not start
  // on the same device yet.
  v1::HeartbeatResponse r = Beat(w, {Status(*a, 1, v1::AttemptStatus::RUNNING)});
  EXPECT_EQ(r.desired_size(), 0);
  EXPECT_EQ(Job(*b).state(), v1::JOB_PENDING);
  v1::AttemptStatus gone = Status(*a, 1, v1::AttemptStatus::EXITED);
  gone.set_exit_code(128 + 15);
  r = Beat(w, {gone});
  ASSERT_EQ(r.desired_size(), 1);
  EXPECT_EQ(r.desired(0).job_id(), *b);
  EXPECT_EQ(Job(*a).state(), v1::JOB_CANCELLED);  // the exit changes nothing
  // Cancelling again returns it unchanged; an unknown job is NOT_FOUND.
  EXPECT_EQ(coord_->Cancel(*a)->state(), v1::JOB_CANCELLED);
  EXPECT_EQ(coord_->Cancel("job-999999").status().code(), absl::StatusCode::kNotFound);
  // A pending job cancels at once.
  auto c = coord_->Submit(Spec(), 0);
  EXPECT_EQ(coord_->Cancel(*c)->state(), v1::JOB_CANCELLED);
}

TEST_F(CoordinatorTest, LostWorkerFailsTheAttemptThenRetriesFromTheCheckpoint) {
  // The checkpoints live where the workers are; the coordinator never looks.
  const std::string dir = "/shared/not-on-the-coordinator/ckpt";
  const std::string w1 = Register(1);
  auto id = coord_->Submit(Spec({"restart.max_restarts=1", "checkpoint.dir=" + dir}), 0);
  v1::HeartbeatResponse first = Beat(w1);
  ASSERT_EQ(first.desired_size(), 1);
  EXPECT_FALSE(first.desired(0).resume());
  Beat(w1, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
  clock_.Advance(absl::Seconds(11));
  const std::string w2 = Register(1);
  coord_->Tick();
  v1::Job j = Job(*id);
  EXPECT_EQ(j.attempts(0).state(), v1::ATTEMPT_FAILED);
  EXPECT_EQ(j.attempts(0).reason(), "worker w-1 missed heartbeats for 10s");
  // Retried at once on w-2, resuming from the newest checkpoint.
  EXPECT_EQ(j.state(), v1::JOB_SCHEDULED);
  ASSERT_EQ(j.attempts_size(), 2);
  v1::HeartbeatResponse r = Beat(w2);
  ASSERT_EQ(r.desired_size(), 1);
  EXPECT_EQ(r.desired(0).attempt(), 2);
  EXPECT_TRUE(r.desired(0).resume());
  // The lost worker must register again; its old attempt is not desired.
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w1);
  EXPECT_EQ(coord_->Heartbeat(hb).status().code(), absl::StatusCode::kNotFound);
  // Out of restarts: the second loss fails the job.
  Beat(w2, {Status(*id, 2, v1::AttemptStatus::RUNNING)});
  clock_.Advance(absl::Seconds(11));
  coord_->Tick();
  j = Job(*id);
  EXPECT_EQ(j.state(), v1::JOB_FAILED);
  EXPECT_EQ(j.reason(), "worker w-2 missed heartbeats for 10s (after 1 restarts of 1)");
}

TEST_F(CoordinatorTest, RestartReloadsJobsAndWorkersReconnectUndisturbed) {
  const std::string w = Register(2);
  auto running = coord_->Submit(Spec(), 0);
  auto done = coord_->Submit(Spec(), 0);
  auto queued = coord_->Submit(Spec({"distribution.devices_per_worker=2"}), 0);
  v1::AttemptStatus st = Status(*running, 1, v1::AttemptStatus::RUNNING);
  st.add_logs()->set_text("before the restart");
  v1::AttemptStatus st2 = Status(*done, 1, v1::AttemptStatus::EXITED);
  Beat(w, {st, st2});
  ASSERT_EQ(Job(*done).state(), v1::JOB_SUCCEEDED);
  ASSERT_EQ(Job(*running).state(), v1::JOB_RUNNING);
  ASSERT_EQ(Job(*queued).state(), v1::JOB_PENDING);

  Restart();
  EXPECT_EQ(Job(*running).state(), v1::JOB_RUNNING);
  EXPECT_EQ(Job(*queued).state(), v1::JOB_PENDING);
  EXPECT_EQ(Job(*done).state(), v1::JOB_SUCCEEDED);
  // The worker's heartbeat is refused until it registers again.
  v1::HeartbeatRequest hb;
  hb.set_worker_id(w);
  EXPECT_EQ(coord_->Heartbeat(hb).status().code(), absl::StatusCode::kNotFound);
  clock_.Advance(absl::Seconds(5));
  coord_->Tick();
  v1::RegisterWorkerRequest again = Reg(2, w);
  *again.add_attempts() = Status(*running, 1, v1::AttemptStatus::RUNNING);
  ASSERT_TRUE(coord_->RegisterWorker(again).ok());
  v1::HeartbeatResponse r = Beat(w, {Status(*running, 1, v1::AttemptStatus::RUNNING)});
  ASSERT_EQ(r.desired_size(), 1);
  EXPECT_EQ(r.desired(0).job_id(), *running);
  EXPECT_EQ(r.desired(0).attempt(), 1);  // the same attempt, undisturbed
  clock_.Advance(absl::Seconds(8));      // 13 s after the restart
  Beat(w, {Status(*running, 1, v1::AttemptStatus::RUNNING)});
  coord_->Tick();
  v1::Job j = Job(*running);
  EXPECT_EQ(j.state(), v1::JOB_RUNNING);
  EXPECT_EQ(j.attempts_size(), 1);
  EXPECT_EQ((*coord_->ReadLogs(*running, 0, 10))[0].text(), "before the restart");
}

TEST_F(CoordinatorTest, WorkerThatNeverComesBackAfterARestartFailsItsAttempts) {
  const std::string w = Register(1);
  auto id = coord_->Submit(Spec({"restart.max_restarts=0"}), 0);
  Beat(w, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
  Restart();
  clock_.Advance(absl::Seconds(9));
  coord_->Tick();
  EXPECT_EQ(Job(*id).state(), v1::JOB_RUNNING);  // still within the grace
  clock_.Advance(absl::Seconds(2));
  coord_->Tick();
  v1::Job j = Job(*id);
  EXPECT_EQ(j.state(), v1::JOB_FAILED);
  EXPECT_EQ(j.reason(),
            "worker w-1 did not register again within 10s of the coordinator's restart");
}

TEST_F(CoordinatorTest, ProgressIsNotWrittenOnEveryHeartbeat) {
  const std::string w = Register(1);
  auto id = coord_->Submit(Spec(), 0);
  Beat(w, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
  const int64_t writes = store_.writes();
  for (int i = 1; i <= 4; ++i) {
    v1::AttemptStatus st = Status(*id, 1, v1::AttemptStatus::RUNNING);
    st.mutable_progress()->set_step(i);
    Beat(w, {st});
    clock_.Advance(absl::Seconds(1));
    coord_->Tick();
  }
  EXPECT_EQ(store_.writes(), writes);
  EXPECT_EQ(Job(*id).progress().step(), 4);
  clock_.Advance(absl::Seconds(2));
  coord_->Tick();  // 6 s since the last write: flushed
  EXPECT_EQ(store_.writes(), writes + 1);
  EXPECT_EQ(store_.Get(*id)->progress().step(), 4);
}

TEST_F(CoordinatorTest, WatchersSeeChangesAndTheEnd) {
  const std::string w = Register(1);
  auto id = coord_->Submit(Spec(), 0);
  auto first = coord_->WaitForJob(*id, 0, absl::ZeroDuration());
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->changed);
  EXPECT_EQ(first->job.state(), v1::JOB_SCHEDULED);
  auto idle = coord_->WaitForJob(*id, first->version, absl::Milliseconds(50));
  ASSERT_TRUE(idle.ok());
  EXPECT_FALSE(idle->changed);

  std::thread finisher([&] {
    absl::SleepFor(absl::Milliseconds(50));
    Beat(w, {Status(*id, 1, v1::AttemptStatus::EXITED)});
  });
  std::vector<v1::JobState> seen;
  uint64_t v = first->version;
  while (true) {
    auto s = coord_->WaitForJob(*id, v, absl::Seconds(10));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->changed);
    v = s->version;
    seen.push_back(s->job.state());
    if (IsTerminal(s->job.state())) break;
  }
  finisher.join();
  EXPECT_EQ(seen.back(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(coord_->WaitForJob("job-777777", 0, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
  auto ended = coord_->WaitForLogs(*id, 0, absl::Seconds(10));
  ASSERT_TRUE(ended.ok());
  EXPECT_TRUE(*ended);
}

TEST_F(CoordinatorTest, RegistrationRejectsBadDevices) {
  v1::RegisterWorkerRequest r = Reg(2);
  r.mutable_devices(1)->set_index(0);
  auto dup = coord_->RegisterWorker(r);
  ASSERT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("devices[1].index"), std::string::npos);
  r = Reg(1);
  r.mutable_devices(0)->set_kind("tpu");
  EXPECT_EQ(coord_->RegisterWorker(r).status().code(), absl::StatusCode::kInvalidArgument);
  v1::HeartbeatRequest hb;
  EXPECT_EQ(coord_->Heartbeat(hb).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorTest, ListWorkersShowsFreeDevicesAndRunningAttempts) {
  const std::string w = Register(2);
  auto id = coord_->Submit(Spec(), 0);
  std::vector<v1::Worker> ws = coord_->ListWorkers();
  ASSERT_EQ(ws.size(), 1u);
  EXPECT_TRUE(ws[0].alive());
  EXPECT_EQ(ws[0].free_cpu(), 1);
  ASSERT_EQ(ws[0].running_size(), 1);
  EXPECT_EQ(ws[0].running(0), *id + "/1");
  clock_.Advance(absl::Seconds(11));
  coord_->Tick();
  ws = coord_->ListWorkers();
  EXPECT_FALSE(ws[0].alive());
  EXPECT_EQ(ws[0].reason(), "worker w-1 missed heartbeats for 10s");
}

}  // namespace
}  // namespace yoke::server
