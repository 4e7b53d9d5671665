// The Coordinator class through its public API, with a fake clock
// (coordinator/testing/coordinator_fixture.h): a job's whole journey,
// reloading after a restart, what Tick does (lost workers, progress
// flushes) and the metrics. Mirrors coordinator/coordinator.cc; the other
// parts are coordinator_jobs_test.cc (client calls),
// coordinator_workers_test.cc (the worker protocol) and
// coordinator_lifecycle_test.cc (scheduling, ending attempts, restarts).
#include "coordinator/coordinator.h"

#include <string>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/testing/coordinator_fixture.h"
#include "gtest/gtest.h"

namespace yoke::server::coordinator_testing {
namespace {

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

// A job of many short epochs (an endless job of 8-step epochs runs
// thousands a second) reports them a heartbeat at a time. What the
// coordinator keeps, serves and writes of its history stays bounded, in
// order, with the newest epoch; so does the final result's copy.
TEST_F(CoordinatorTest, AJobOfManyShortEpochsKeepsABoundedHistory) {
  const std::string w = Register(1);
  auto id = coord_->Submit(Spec(), 0);
  ASSERT_TRUE(id.ok()) << id.status();
  Beat(w, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
  int epoch = 0;
  for (int beat = 0; beat < 40; ++beat) {
    v1::AttemptStatus st = Status(*id, 1, v1::AttemptStatus::RUNNING);
    for (int i = 0; i < 500; ++i) st.add_epochs()->set_epoch(++epoch);
    Beat(w, {st});
  }
  const v1::Job running = Job(*id);
  EXPECT_LE(running.history_size(), Coordinator::kMaxHistoryEpochs);
  EXPECT_GE(running.history_size(), Coordinator::kMaxHistoryEpochs / 4);
  EXPECT_EQ(running.history(running.history_size() - 1).epoch(), epoch);
  EXPECT_LE(store_.Get(*id)->history_size(), Coordinator::kMaxHistoryEpochs);

  v1::AttemptStatus done = Status(*id, 1, v1::AttemptStatus::EXITED);
  done.set_exit_code(0);
  for (int e = 1; e <= epoch; ++e) done.mutable_result()->add_history()->set_epoch(e);
  Beat(w, {done});
  const v1::Job finished = Job(*id);
  ASSERT_EQ(finished.state(), v1::JOB_SUCCEEDED);
  EXPECT_LE(finished.result().history_size(), Coordinator::kMaxHistoryEpochs);
  EXPECT_EQ(finished.result().history(finished.result().history_size() - 1).epoch(), epoch);
  EXPECT_EQ(finished.result().history(0).epoch(), 1);
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

}  // namespace
}  // namespace yoke::server::coordinator_testing
