// The attempt lifecycle of the Coordinator (coordinator/coordinator_lifecycle.cc,
// and coordinator/coordinator_status.cc for what ends an attempt), through
// its public API with a fake clock (coordinator/testing/coordinator_fixture.h):
// gang scheduling, a failed or lost share ending the attempt, the restart
// policy with its fresh rendezvous namespaces, and which rank's result,
// progress and history the job keeps.
#include <string>
#include <utility>
#include <vector>

#include "coordinator/coordinator.h"
#include "coordinator/testing/coordinator_fixture.h"
#include "gtest/gtest.h"

namespace yoke::server::coordinator_testing {
namespace {

TEST_F(CoordinatorTest, GangWaitsForAllWorkersAndReportsWhy) {
  const std::string w1 = Register(1);
  const std::string w2 = Register(1);
  auto small = coord_->Submit(Spec(), 0);  // takes w-1
  auto id = coord_->Submit(Spec({"distribution.workers=2"}), 0);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(Job(*id).reason(),
            "needs 2 workers with 1 cpu device each; free: 1 worker (w-2: 1 cpu); held for it "
            "until the rest free up: w-2: 1 cpu");
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

// Running out of memory (issue 30) happens again with the same spec in the
// same share: the job fails at once, saying why it was not retried, while
// another failure with restarts left is retried.
TEST_F(CoordinatorTest, AnOutOfMemoryAttemptIsNotRetriedUnchanged) {
  const std::string w = Register(1);
  for (const auto& [code, reason] :
       {std::pair<int, std::string>{1, "out of memory: 4000048000064 bytes for dense_0 output"},
        {137, "killed by signal 9 (Killed): out of memory: the trainer passed its memory share"}}) {
    auto id = coord_->Submit(Spec({"restart.max_restarts=3"}), 0);
    ASSERT_TRUE(id.ok()) << id.status();
    Beat(w, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
    v1::AttemptStatus oom = Status(*id, 1, v1::AttemptStatus::EXITED);
    oom.set_exit_code(code);
    oom.set_reason(reason);
    Beat(w, {oom});
    const v1::Job j = Job(*id);
    EXPECT_EQ(j.state(), v1::JOB_FAILED) << j.reason();
    EXPECT_EQ(j.attempts_size(), 1);
    EXPECT_NE(j.reason().find("; not retried: the same spec would run out of memory again"),
              std::string::npos)
        << j.reason();
    Beat(w);  // the worker reports the trainer gone: its device is free again
  }
  auto other = coord_->Submit(Spec({"restart.max_restarts=3"}), 0);
  Beat(w, {Status(*other, 1, v1::AttemptStatus::RUNNING)});
  v1::AttemptStatus crash = Status(*other, 1, v1::AttemptStatus::EXITED);
  crash.set_exit_code(139);
  crash.set_reason("killed by signal 11 (Segmentation fault)");
  Beat(w, {crash});
  EXPECT_EQ(Job(*other).attempts_size(), 2) << Job(*other).reason();  // retried
}

// An EXITED status of `attempt` of `job` with `code` and `reason`.
v1::AttemptStatus Exited(const std::string& job, int attempt, int code, const std::string& reason) {
  v1::AttemptStatus st = Status(job, attempt, v1::AttemptStatus::EXITED);
  st.set_exit_code(code);
  st.set_reason(reason);
  return st;
}

class EchoTest : public CoordinatorTest {
 protected:
  // A two-rank job (w1 rank 0, w2 rank 1) with restarts left, running.
  void SetUp() override {
    CoordinatorTest::SetUp();
    w1_ = Register(1);
    w2_ = Register(1);
    auto id = coord_->Submit(Spec({"distribution.workers=2", "restart.max_restarts=3"}), 0);
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
    Running(1);
  }
  void Running(int attempt) {
    Beat(w1_, {Status(id_, attempt, v1::AttemptStatus::RUNNING)});
    Beat(w2_, {Status(id_, attempt, v1::AttemptStatus::RUNNING)});
  }
  std::string w1_, w2_, id_;
};

// A share that fails only because its peer died ("Connection closed by
// peer") usually reports first; the peer's own exit, which says why (out of
// memory: not retried), comes a moment later. The attempt waits for it.
TEST_F(EchoTest, APeersEchoWaitsForThePeersOwnExit) {
  Beat(w2_, {Exited(id_, 1, 1, "pipeline: receiving from stage 0: Connection closed by peer")});
  EXPECT_EQ(Job(id_).state(), v1::JOB_RUNNING);
  clock_.Advance(absl::Seconds(1));
  coord_->Tick();
  EXPECT_EQ(Job(id_).state(), v1::JOB_RUNNING);
  Beat(w1_, {Exited(id_, 1, 137,
                    "killed by signal 9 (Killed): out of memory: the trainer passed its memory "
                    "share")});
  const v1::Job j = Job(id_);
  EXPECT_EQ(j.state(), v1::JOB_FAILED) << j.reason();
  EXPECT_EQ(j.attempts_size(), 1);
  EXPECT_NE(j.reason().find("trainer of rank 0 on w-1 killed by signal 9 (Killed): out of memory"),
            std::string::npos)
      << j.reason();
  EXPECT_NE(j.reason().find("not retried"), std::string::npos) << j.reason();
}

// When the peer's own exit does not come (it hangs, or its worker is slow to
// say), the echo fails the attempt after the grace, retryable as before; and
// when every share only echoes, the first echo is the reason at once.
TEST_F(EchoTest, AnEchoAloneFailsTheAttemptAfterTheGrace) {
  Beat(w2_, {Exited(id_, 1, 1, "allreduce: Connection reset by peer")});
  clock_.Advance(absl::Milliseconds(2900));
  coord_->Tick();
  EXPECT_EQ(Job(id_).attempts(0).state(), v1::ATTEMPT_RUNNING);
  clock_.Advance(absl::Milliseconds(200));
  coord_->Tick();
  EXPECT_EQ(Job(id_).attempts(0).state(), v1::ATTEMPT_FAILED);
  Beat(w1_);  // its trainer stopped: the device is free for the retry
  coord_->Tick();
  v1::Job j = Job(id_);
  ASSERT_EQ(j.attempts_size(), 2) << j.reason();  // retried
  EXPECT_NE(j.attempts(0).reason().find("rank 1 on w-2 exited with code 1: allreduce: Connection "
                                        "reset by peer"),
            std::string::npos)
      << j.attempts(0).reason();

  // Attempt 2: both shares echo; the first one's reason, at once.
  Running(2);
  Beat(w1_, {Exited(id_, 2, 1, "communicator broken by a peer's failure: rank 1 left")});
  Beat(w2_, {Exited(id_, 2, 1, "Connection closed by peer")});
  coord_->Tick();
  j = Job(id_);
  ASSERT_EQ(j.attempts_size(), 3) << j.reason();
  EXPECT_NE(j.attempts(1).reason().find("rank 0 on w-1 exited with code 1: communicator broken"),
            std::string::npos)
      << j.attempts(1).reason();
}

// max_run_seconds (issue 30): past it the job fails for good and its worker
// is told to stop the trainer; the coordinator's default covers the rest.
TEST_F(CoordinatorTest, MaxRunTimeFailsTheJobWithoutARetry) {
  default_max_run_seconds_ = 30;
  Restart();
  const std::string w = Register(2);
  auto own = coord_->Submit(Spec({"max_run_seconds=60", "restart.max_restarts=3"}), 0);
  auto plain = coord_->Submit(Spec(), 0);
  ASSERT_TRUE(own.ok() && plain.ok());
  Beat(w, {Status(*own, 1, v1::AttemptStatus::RUNNING),
           Status(*plain, 1, v1::AttemptStatus::RUNNING)});
  clock_.Advance(absl::Seconds(29));
  Beat(w);
  coord_->Tick();
  EXPECT_EQ(Job(*plain).state(), v1::JOB_RUNNING);
  clock_.Advance(absl::Seconds(2));
  Beat(w);
  coord_->Tick();
  EXPECT_EQ(Job(*plain).state(), v1::JOB_FAILED);
  EXPECT_EQ(Job(*plain).reason(),
            "ran for 31s since it first started, past the coordinator's default_max_run_seconds "
            "(30)");
  EXPECT_EQ(Job(*own).state(), v1::JOB_RUNNING);
  clock_.Advance(absl::Seconds(30));
  Beat(w);
  coord_->Tick();
  const v1::Job j = Job(*own);
  EXPECT_EQ(j.state(), v1::JOB_FAILED);
  EXPECT_EQ(j.reason(), "ran for 1m1s since it first started, past its max_run_seconds (60)");
  EXPECT_EQ(j.attempts_size(), 1);
  EXPECT_EQ(j.attempts(0).state(), v1::ATTEMPT_CANCELLED);
  // The next heartbeat no longer asks the worker to run it.
  const v1::HeartbeatResponse after = Beat(w);
  for (const v1::DesiredAttempt& d : after.desired()) EXPECT_NE(d.job_id(), *own);
}

// Fair share (issue 30): a submitter that just ran a device for ten minutes
// waits behind one that did not, though its job is older.
TEST_F(CoordinatorTest, TheSubmitterThatUsedLessLatelyGoesFirst) {
  const std::string w = Register(1);
  auto long_job = coord_->Submit(Spec(), 0, "hog");
  Beat(w, {Status(*long_job, 1, v1::AttemptStatus::RUNNING)});
  auto hog_next = coord_->Submit(Spec(), 0, "hog");
  clock_.Advance(absl::Seconds(1));
  auto bob = coord_->Submit(Spec(), 0, "bob");
  ASSERT_TRUE(long_job.ok() && hog_next.ok() && bob.ok());
  clock_.Advance(absl::Minutes(10));
  Beat(w, {Status(*long_job, 1, v1::AttemptStatus::EXITED)});
  Beat(w);
  EXPECT_EQ(Job(*bob).state(), v1::JOB_SCHEDULED) << Job(*bob).reason();
  EXPECT_EQ(Job(*hog_next).state(), v1::JOB_PENDING);
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

// A share that exited before a coordinator crash (the worker, its exit
// acknowledged, forgets it) is done after the restart: it is not started
// again, and rank 0's result, which came with its exit, is the job's when the
// last share ends. (CI saw the daemons start rank 0 again, and the attempt
// wait for a rank 1 that had finished.)
TEST_F(MultiWorkerTest, AShareThatExitedBeforeACoordinatorRestartIsNotStartedAgain) {
  StartTwoRanks();
  v1::AttemptStatus done = Exit(1, 0, "");
  done.mutable_result()->set_steps(564);
  done.mutable_result()->set_test_accuracy(0.84);
  Beat(w1_, {done});
  ASSERT_EQ(Job(id_).state(), v1::JOB_RUNNING) << "rank 1 still trains";

  Restart();
  for (const std::string& w : {w1_, w2_}) {
    v1::RegisterWorkerRequest again = Reg(1, w);
    if (w == w2_) *again.add_attempts() = Status(id_, 1, v1::AttemptStatus::RUNNING);
    ASSERT_TRUE(coord_->RegisterWorker(again).ok());
  }
  // w-1 lists nothing: the coordinator must not want rank 0 from it again.
  const v1::HeartbeatResponse r = Beat(w1_);
  for (const v1::DesiredAttempt& d : r.desired()) {
    EXPECT_NE(d.job_id(), id_) << "rank 0, which had finished, was started again";
  }
  EXPECT_EQ(Job(id_).state(), v1::JOB_RUNNING);
  Beat(w2_, {Exit(1, 0, "")});
  const v1::Job j = Job(id_);
  EXPECT_EQ(j.state(), v1::JOB_SUCCEEDED) << j.reason();
  EXPECT_EQ(j.attempts_size(), 1);
  EXPECT_EQ(j.result().steps(), 564);
  EXPECT_EQ(j.result().test_accuracy(), 0.84);
}

// A share that failed only as the echo of a peer's failure, recorded before
// the crash, still fails the attempt when its peer's own reason never comes.
TEST_F(MultiWorkerTest, AnEchoRecordedBeforeACoordinatorRestartStillFailsTheAttempt) {
  StartTwoRanks({"restart.max_restarts=0"});
  Beat(w1_, {Exit(1, 1, "communicator broken by a peer's failure: rank 1 left")});
  Restart();
  v1::RegisterWorkerRequest again = Reg(1, w2_);
  *again.add_attempts() = Status(id_, 1, v1::AttemptStatus::RUNNING);
  ASSERT_TRUE(coord_->RegisterWorker(again).ok());
  ASSERT_TRUE(coord_->RegisterWorker(Reg(1, w1_)).ok());
  Beat(w2_, {Exit(1, 0, "")});
  const v1::Job j = Job(id_);
  EXPECT_EQ(j.state(), v1::JOB_FAILED) << "a failed share is not a success";
  EXPECT_NE(j.reason().find("exited with code 1"), std::string::npos) << j.reason();
}

}  // namespace
}  // namespace yoke::server::coordinator_testing
