// A worker daemon or a trainer killed with SIGKILL mid-job on a `yoke up`
// cluster of two workers, with restarts allowed: the trainer dies with its
// daemon (no orphan), the attempt fails with a reason that names the worker
// (or the signal), and the job resumes from its newest checkpoint on the
// workers that are alive and SUCCEEDS with every epoch in its history
// exactly once. Each test prints how long the job stood still, from the kill
// to the first step of the new attempt (bench/results/recovery.md).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

using Clock = std::chrono::steady_clock;

// The Fashion-MNIST CNN on one thread: 3 epochs of 94 steps (6,000
// examples, batch 64), a few seconds each, so the kill lands mid-epoch, and
// a checkpoint every 25 steps.
constexpr char kJob[] =
    " --set distribution.workers=1 --set training.epochs=3 --set training.threads=1"
    " --set data.train.num_examples=6000 --set data.test.num_examples=1000"
    " --set restart.max_restarts=2 --set checkpoint.every_steps=25"
    " --set training.log_every_steps=5";

struct Crash {
  std::string id;
  v1::Job job;
  double stalled_seconds = 0;  // kill -> first step of the next attempt
  int64_t step_at_kill = 0;
  int64_t resumed_at = 0;  // the step the next attempt first reported
};

// Submits the job, waits until it is past `kill_after` steps (and so past a
// checkpoint), kills what `victim` picks, then follows the job to its end.
void RunAndKill(const TestCluster& cluster, const std::string& ckpt_dir,
                const std::function<pid_t(pid_t daemon, pid_t trainer)>& victim, Crash* out) {
  RunResult s = cluster.Yoke("submit " + Config("fashion_mnist_cnn.yaml") + kJob +
                             " --set checkpoint.dir=" + ckpt_dir);
  ASSERT_EQ(s.exit_code, 0) << s.out;
  out->id = s.out.substr(0, s.out.find('\n'));
  v1::Job& job = out->job;
  ASSERT_TRUE(WaitFor([&] { return cluster.GetJob(out->id, &job) && job.progress().step() >= 120; },
                      std::chrono::seconds(180)))
      << job.DebugString() << cluster.Logs();
  // The daemon running the job's only share is the one with a trainer.
  pid_t daemon = 0, trainer = 0;
  for (int w : cluster.state().worker_pids) {
    std::vector<pid_t> t = ChildrenOf(w, "yoke-trainer");
    if (!t.empty()) daemon = w, trainer = t[0];
  }
  ASSERT_GT(trainer, 0) << "no trainer found" << cluster.Logs();
  const pid_t target = victim(daemon, trainer);
  ASSERT_EQ(kill(target, SIGKILL), 0);
  const auto killed = Clock::now();
  out->step_at_kill = job.progress().step();

  // No orphan: the trainer dies with its daemon, whichever was killed.
  EXPECT_TRUE(WaitFor([&] { return !Alive(trainer); }, std::chrono::seconds(5)))
      << "trainer " << trainer << " outlived its daemon";

  // The next attempt's first step: the job keeps the last attempt's
  // progress until the new one reports its own.
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.GetJob(out->id, &job) && job.attempts_size() >= 2 &&
               job.state() == v1::JOB_RUNNING;
      },
      std::chrono::seconds(120)))
      << job.DebugString() << cluster.Logs();
  const int64_t stale = job.progress().step();
  ASSERT_TRUE(
      WaitFor([&] { return cluster.GetJob(out->id, &job) && job.progress().step() != stale; },
              std::chrono::seconds(120)))
      << job.DebugString() << cluster.Logs();
  out->stalled_seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  out->resumed_at = job.progress().step();

  ASSERT_TRUE(cluster.WaitForEnd(out->id, &job, std::chrono::seconds(300)))
      << job.DebugString() << cluster.Logs();
}

void ExpectEveryEpochOnce(const v1::Job& job) {
  std::vector<int> epochs;
  for (const auto& e : job.history()) epochs.push_back(e.epoch());
  EXPECT_EQ(epochs, std::vector<int>({1, 2, 3})) << "every epoch exactly once";
}

TEST(WorkerCrashE2ETest, WorkerDaemonKillNineResumesOnTheOtherWorker) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  const std::string ckpt = MakeTempDir("yoke_e2e_worker_crash_ckpt");
  Crash c;
  RunAndKill(
      cluster, ckpt, [](pid_t daemon, pid_t) { return daemon; }, &c);
  if (::testing::Test::HasFatalFailure()) return;
  const v1::Job& job = c.job;
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_GE(job.attempts_size(), 2);
  const std::string lost = job.attempts(0).assignments(0).worker_id();
  EXPECT_EQ(job.attempts(0).state(), v1::ATTEMPT_FAILED);
  EXPECT_NE(job.attempts(0).reason().find("worker " + lost + " missed heartbeats"),
            std::string::npos)
      << job.attempts(0).reason();
  EXPECT_NE(job.attempts(1).assignments(0).worker_id(), lost) << "resumed on the live worker";
  // Resumed from a checkpoint at or after step 100 (every 25 steps; killed
  // past 120), not from step 0.
  EXPECT_GE(c.resumed_at, 100) << job.DebugString();
  ExpectEveryEpochOnce(job);
  std::printf(
      "worker kill -9 at step %lld: next attempt's first step %.1f s later, "
      "at step %lld (checkpoint every 25 steps, heartbeat deadline 10 s)\n",
      static_cast<long long>(c.step_at_kill), c.stalled_seconds,
      static_cast<long long>(c.resumed_at));
  std::error_code ec;
  std::filesystem::remove_all(ckpt, ec);
}

TEST(WorkerCrashE2ETest, TrainerKillNineIsRetriedFromTheCheckpoint) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  const std::string ckpt = MakeTempDir("yoke_e2e_trainer_crash_ckpt");
  Crash c;
  RunAndKill(
      cluster, ckpt, [](pid_t, pid_t trainer) { return trainer; }, &c);
  if (::testing::Test::HasFatalFailure()) return;
  const v1::Job& job = c.job;
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_GE(job.attempts_size(), 2);
  EXPECT_NE(job.attempts(0).reason().find("killed by signal 9"), std::string::npos)
      << job.attempts(0).reason();
  EXPECT_NE(job.attempts(0).reason().find(job.attempts(0).assignments(0).worker_id()),
            std::string::npos)
      << job.attempts(0).reason();
  EXPECT_GE(c.resumed_at, 100) << job.DebugString();
  ExpectEveryEpochOnce(job);
  std::printf(
      "trainer kill -9 at step %lld: next attempt's first step %.1f s later, "
      "at step %lld (checkpoint every 25 steps)\n",
      static_cast<long long>(c.step_at_kill), c.stalled_seconds,
      static_cast<long long>(c.resumed_at));
  std::error_code ec;
  std::filesystem::remove_all(ckpt, ec);
}

}  // namespace
}  // namespace yoke::e2e
