// Crashes on the network-namespace cluster (tests/netns_cluster.h): every
// daemon on a "host" of its own, ranks talking over veths and a bridge.
//   - The coordinator is killed (-9) mid-job and started again 5 s later
//     with the same command line: the job goes on in the same attempt, the
//     workers come back under their own ids, and no id is handed out twice.
//   - The daemon of a worker running the job is killed (-9): its trainer dies
//     with it, the attempt fails naming the worker, and the job resumes from
//     its checkpoint on the workers still alive.
//   - A trainer is killed (-9): the attempt fails naming the signal and the
//     worker, and the job resumes from its checkpoint.
// Each ends SUCCEEDED with every epoch in the history exactly once.
// Skips visibly where network namespaces cannot be created (not root).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e_util.h"
#include "tests/netns_cluster.h"

namespace yoke::e2e {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

#define SKIP_WITHOUT_NETNS(cluster) \
  if (!(cluster).ok()) GTEST_SKIP() << "multi-host test skipped: " << (cluster).skip_reason()

std::vector<int> Epochs(const v1::Job& job) {
  std::vector<int> out;
  for (const auto& e : job.history()) out.push_back(e.epoch());
  return out;
}

// The Fashion-MNIST CNN on 2 workers, one thread each: 3 epochs of 94 steps
// (6,000 examples, global batch 64), so a kill lands mid-job, and a
// checkpoint every 25 steps on the directory every "host" sees.
std::string CnnJob(const std::string& ckpt) {
  return Config("fashion_mnist_cnn.yaml") +
         " --set distribution.workers=2 --set training.epochs=3 --set training.threads=1"
         " --set data.train.num_examples=6000 --set data.test.num_examples=1000"
         " --set restart.max_restarts=2 --set checkpoint.every_steps=25"
         " --set training.log_every_steps=5 --set distribution.collective_timeout_s=10"
         " --set checkpoint.dir=" +
         ckpt;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string Submit(const NetnsCluster& cluster, const std::string& args) {
  RunResult s = cluster.Yoke("submit " + args, true);
  EXPECT_EQ(s.exit_code, 0) << s.out;
  return s.exit_code == 0 ? s.out.substr(0, s.out.find('\n')) : "";
}

bool WaitForStep(const NetnsCluster& cluster, const std::string& id, int64_t step, v1::Job* job) {
  return WaitFor([&] { return cluster.GetJob(id, job) && job->progress().step() >= step; },
                 seconds(240));
}

// The host whose worker runs a trainer, and that trainer; -1 if none.
int HostWithTrainer(NetnsCluster& cluster, pid_t* trainer) {
  for (size_t h = 0; h < cluster.HostCount(); ++h) {
    std::vector<pid_t> t = ChildrenOf(cluster.worker(static_cast<int>(h)).pid(), "yoke-trainer");
    if (!t.empty()) {
      *trainer = t[0];
      return static_cast<int>(h);
    }
  }
  return -1;
}

struct Crash {
  v1::Job job;             // its final state
  int host = -1;           // the host whose daemon or trainer was killed
  int64_t resumed_at = 0;  // the first step the next attempt reported
  double stalled_s = 0;    // kill -> that step
};

// Kills a worker daemon (or only its trainer) in a running 2-worker CNN job
// on a 3-host cluster, then follows the job to its end.
void KillMidJob(NetnsCluster& cluster, bool kill_daemon, Crash* c) {
  v1::Job* job = &c->job;
  ASSERT_TRUE(cluster.StartCoordinator()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorkers(1)) << cluster.Logs();
  const std::string id = Submit(cluster, CnnJob(cluster.dir() + "/ckpt"));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitForStep(cluster, id, 120, job)) << job->DebugString() << cluster.Logs();
  pid_t trainer = 0;
  c->host = HostWithTrainer(cluster, &trainer);
  ASSERT_GE(c->host, 0) << "no trainer found" << cluster.Logs();
  const pid_t daemon = cluster.worker(c->host).pid();
  ASSERT_EQ(kill(kill_daemon ? daemon : trainer, SIGKILL), 0);
  const auto killed = Clock::now();
  // No orphan: the trainer dies with its daemon.
  EXPECT_TRUE(WaitFor([&] { return !Alive(trainer); }, seconds(5)))
      << "trainer " << trainer << " outlived its daemon";

  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.GetJob(id, job) && job->attempts_size() >= 2 &&
               job->state() == v1::JOB_RUNNING;
      },
      seconds(120)))
      << job->DebugString() << cluster.Logs();
  const int64_t stale = job->progress().step();
  ASSERT_TRUE(WaitFor([&] { return cluster.GetJob(id, job) && job->progress().step() != stale; },
                      seconds(120)))
      << job->DebugString() << cluster.Logs();
  c->stalled_s = std::chrono::duration<double>(Clock::now() - killed).count();
  c->resumed_at = job->progress().step();
  ASSERT_TRUE(cluster.WaitForState(id, seconds(300), job)) << job->DebugString() << cluster.Logs();
}

TEST(MultiHostCrashE2ETest, CoordinatorKillNineThenTheSameCommandLineContinuesTheJob) {
  NetnsCluster cluster(2);
  SKIP_WITHOUT_NETNS(cluster);
  ASSERT_TRUE(cluster.StartCoordinator()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorkers(1)) << cluster.Logs();
  // Heavy enough to be still running after a 5 s outage (1,125 steps).
  const std::string id =
      Submit(cluster, Config("fashion_mnist_mlp.yaml") +
                          " --set distribution.workers=2 --set training.epochs=3"
                          " --set training.threads=1 --set data.train.num_examples=24000"
                          " --set data.test.num_examples=1000 --set restart.max_restarts=0");
  ASSERT_FALSE(id.empty());
  v1::Job job;
  ASSERT_TRUE(WaitForStep(cluster, id, 20, &job)) << job.DebugString() << cluster.Logs();

  // A watcher in the CLI's namespace that runs through the outage: it must
  // be streaming before the kill (a first connection that fails is an error,
  // a stream that breaks is reconnected).
  const std::string watch_log = cluster.dir() + "/watch.out";
  RunResult watch;
  std::thread watcher([&] { watch = cluster.Yoke("watch " + id + " > " + watch_log + " 2>&1"); });
  EXPECT_TRUE(WaitFor([&] { return !ReadFile(watch_log).empty(); }, seconds(20)))
      << "yoke watch printed nothing";

  ASSERT_EQ(kill(cluster.coordinator().pid(), SIGKILL), 0);
  std::this_thread::sleep_for(seconds(5));
  const bool restarted = cluster.StartCoordinator();
  const bool ended = cluster.WaitForState(id, seconds(300), &job);
  watcher.join();
  ASSERT_TRUE(restarted) << cluster.Logs();
  ASSERT_TRUE(ended) << job.DebugString() << cluster.Logs();
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  EXPECT_EQ(job.attempts_size(), 1) << "the job went on in the same attempt";
  EXPECT_EQ(Epochs(job), std::vector<int>({1, 2, 3})) << "every epoch exactly once";
  const std::string watched = ReadFile(watch_log);
  EXPECT_EQ(watch.exit_code, 0) << watched;
  EXPECT_NE(watched.find("reconnecting"), std::string::npos) << watched;
  EXPECT_NE(watched.find("finished: 3 epochs"), std::string::npos) << watched;

  // Both workers back under their own ids, each at its own host's address;
  // no id handed out twice.
  RunResult workers = cluster.Yoke("workers --output json");
  ASSERT_EQ(workers.exit_code, 0) << workers.out;
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(workers.out.find("\"id\":\"w-" + std::to_string(i + 1) + "\""), std::string::npos)
        << workers.out;
    EXPECT_NE(workers.out.find(NetnsCluster::HostAddress(i)), std::string::npos) << workers.out;
  }
  EXPECT_EQ(workers.out.find("\"id\":\"w-3\""), std::string::npos) << workers.out;
  EXPECT_EQ(workers.out.find("\"alive\":false"), std::string::npos) << workers.out;
  std::printf("coordinator kill -9 across namespaces: job %s done in attempt %d, %lld steps\n",
              id.c_str(), job.attempts_size(), static_cast<long long>(job.result().steps()));
}

TEST(MultiHostCrashE2ETest, WorkerDaemonKillNineResumesOnTheLiveHosts) {
  NetnsCluster cluster(3);
  SKIP_WITHOUT_NETNS(cluster);
  Crash c;
  KillMidJob(cluster, /*kill_daemon=*/true, &c);
  if (::testing::Test::HasFatalFailure()) return;
  const v1::Job& job = c.job;
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_GE(job.attempts_size(), 2);
  const std::string lost = "w-" + std::to_string(c.host + 1);
  EXPECT_EQ(job.attempts(0).state(), v1::ATTEMPT_FAILED);
  EXPECT_NE(job.attempts(0).reason().find("worker " + lost), std::string::npos)
      << job.attempts(0).reason();
  for (const auto& a : job.attempts(job.attempts_size() - 1).assignments()) {
    EXPECT_NE(a.worker_id(), lost) << "resumed on a live host";
  }
  // Killed past step 120 with a checkpoint every 25: resumed at >= 100.
  EXPECT_GE(c.resumed_at, 100) << job.DebugString();
  EXPECT_EQ(Epochs(job), std::vector<int>({1, 2, 3})) << "every epoch exactly once";
  std::printf("worker kill -9 on host %d: next attempt's first step %.1f s later, at step %lld\n",
              c.host, c.stalled_s, static_cast<long long>(c.resumed_at));
}

TEST(MultiHostCrashE2ETest, TrainerKillNineIsRetriedFromTheCheckpoint) {
  NetnsCluster cluster(3);
  SKIP_WITHOUT_NETNS(cluster);
  Crash c;
  KillMidJob(cluster, /*kill_daemon=*/false, &c);
  if (::testing::Test::HasFatalFailure()) return;
  const v1::Job& job = c.job;
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_GE(job.attempts_size(), 2);
  const std::string& reason = job.attempts(0).reason();
  EXPECT_NE(reason.find("killed by signal 9"), std::string::npos) << reason;
  EXPECT_NE(reason.find("w-" + std::to_string(c.host + 1)), std::string::npos) << reason;
  EXPECT_GE(c.resumed_at, 100) << job.DebugString();
  EXPECT_EQ(Epochs(job), std::vector<int>({1, 2, 3})) << "every epoch exactly once";
  std::printf("trainer kill -9 on host %d: next attempt's first step %.1f s later, at step %lld\n",
              c.host, c.stalled_s, static_cast<long long>(c.resumed_at));
}

}  // namespace
}  // namespace yoke::e2e
