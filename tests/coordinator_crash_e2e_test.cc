// Coordinator crash (kill -9) mid-job on a `yoke up` cluster, then
// `yoke up --dir DIR` 5 s later, as docs/operations.md tells the user: the
// new coordinator listens on the same port with the same store, the workers
// of the last run keep their trainers and register again under their own
// ids (no new workers start), and the job goes on in the same attempt to
// SUCCEEDED with every epoch in its history exactly once. `yoke down` then
// leaves no process behind.
//
// And the same crash handled as a process supervisor would: the
// coordinator restarted at once with its own command line, as `yoke up`
// started it (--listen 127.0.0.1:0 among it): it listens on the same port,
// and the job goes on in the same attempt.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

TEST(CoordinatorCrashE2ETest, KillNineThenYokeUpDirResumesTheRunningJob) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  // The first hidden layer 8x wider than the config's, as below: CI's
  // machine trained the config's MLP to its end (564 steps) in about a
  // second, before the crash.
  RunResult s = cluster.Yoke("submit " + Config("fashion_mnist_mlp.yaml") +
                             " --set distribution.workers=2 --set training.epochs=3"
                             " --set model.layers[1].dense.units=2048"
                             " --set training.threads=1 --set data.train.num_examples=12000"
                             " --set data.test.num_examples=1000 --set restart.max_restarts=0");
  ASSERT_EQ(s.exit_code, 0) << s.out;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  v1::Job job;
  ASSERT_TRUE(WaitFor([&] { return cluster.GetJob(id, &job) && job.progress().step() >= 20; },
                      std::chrono::seconds(120)))
      << job.DebugString() << cluster.Logs();
  const std::string address = cluster.address();
  RunResult before = cluster.Yoke("workers --output json");

  ASSERT_EQ(kill(cluster.state().coordinator_pid, SIGKILL), 0);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  RunResult up = Sh("YOKE_STATE_DIR=" + cluster.dir() + "/state " + BinDir() +
                        "/yoke up --detach --workers 2 --dir " + cluster.dir(),
                    true);
  ASSERT_EQ(up.exit_code, 0) << up.out << cluster.Logs();
  EXPECT_NE(up.out.find("still running"), std::string::npos) << up.out;
  EXPECT_NE(up.out.find(address), std::string::npos) << "the same port: " << up.out;

  ASSERT_TRUE(cluster.WaitForEnd(id, &job, std::chrono::seconds(300)))
      << job.DebugString() << cluster.Logs();
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  EXPECT_EQ(job.attempts_size(), 1) << "the job went on in the same attempt";
  std::vector<int> epochs;
  for (const auto& e : job.history()) epochs.push_back(e.epoch());
  EXPECT_EQ(epochs, std::vector<int>({1, 2, 3})) << "every epoch exactly once";
  // The training lost to the outage: none (the same attempt, all its steps).
  std::printf("coordinator outage: job %s finished in attempt %d at step %lld\n", id.c_str(),
              job.attempts_size(), static_cast<long long>(job.result().steps()));

  // The same two workers, under their own ids: no daemon was started twice.
  // `yoke workers --output json` is an array of workers.
  RunResult after = cluster.Yoke("workers --output json");
  ASSERT_EQ(after.exit_code, 0) << after.out;
  EXPECT_NE(after.out.find("\"id\":\"w-1\""), std::string::npos) << after.out;
  EXPECT_NE(after.out.find("\"id\":\"w-2\""), std::string::npos) << after.out;
  EXPECT_EQ(after.out.find("\"id\":\"w-3\""), std::string::npos)
      << "a second set of workers started: " << before.out << after.out;
  EXPECT_EQ(after.out.find("\"alive\":false"), std::string::npos) << after.out;

  // `yoke down` after the crash stops every daemon: the new coordinator and
  // the workers that outlived the old one, with their trainers.
  auto st = client::ReadClusterState(cluster.dir() + "/cluster.json");
  ASSERT_TRUE(st.ok()) << st.status();
  std::vector<pid_t> pids = {st->coordinator_pid};
  for (int w : st->worker_pids) {
    pids.push_back(w);
    for (pid_t c : ChildrenOf(w)) pids.push_back(c);
  }
  RunResult down = Sh("YOKE_STATE_DIR=" + cluster.dir() + "/state " + BinDir() +
                          "/yoke down --grace 5 --dir " + cluster.dir(),
                      true);
  EXPECT_EQ(down.exit_code, 0) << down.out;
  for (pid_t p : pids) {
    EXPECT_TRUE(WaitFor([&] { return !Alive(p); }, std::chrono::seconds(10)))
        << "pid " << p << " outlived yoke down: " << down.out;
  }
}

// The command line of `pid`, from /proc/PID/cmdline.
std::vector<std::string> ArgvOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  for (size_t b = 0; b < all.size();) {
    size_t e = all.find('\0', b);
    if (e == std::string::npos) e = all.size();
    argv.push_back(all.substr(b, e - b));
    b = e + 1;
  }
  return argv;
}

TEST(CoordinatorCrashE2ETest, KillNineThenItsOwnCommandLineResumesTheRunningJob) {
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  // The first hidden layer is 8x wider than the config's, so the job still
  // runs when the test sees its 20th step: with the config's own MLP a fast
  // machine finished all three epochs before the first progress report
  // (CI saw JOB_SUCCEEDED at the crash).
  RunResult s = cluster.Yoke("submit " + Config("fashion_mnist_mlp.yaml") +
                             " --set training.epochs=3 --set training.threads=1"
                             " --set data.train.num_examples=20000"
                             " --set model.layers[1].dense.units=2048"
                             " --set data.test.num_examples=1000 --set restart.max_restarts=0");
  ASSERT_EQ(s.exit_code, 0) << s.out;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  v1::Job job;
  ASSERT_TRUE(WaitFor([&] { return cluster.GetJob(id, &job) && job.progress().step() >= 20; },
                      std::chrono::seconds(120)))
      << job.DebugString() << cluster.Logs();
  ASSERT_EQ(job.state(), v1::JOB_RUNNING) << "the job must still run at the crash";
  ASSERT_LT(job.history_size(), 3) << "the job must still run at the crash; make it longer";

  // What a supervisor would run again: the coordinator's exact command line.
  const pid_t pid = cluster.state().coordinator_pid;
  const std::vector<std::string> argv = ArgvOf(pid);
  ASSERT_FALSE(argv.empty());
  EXPECT_EQ(ProgramName(pid), "yoke-coordinator");
  EXPECT_NE(CommandLine(pid).find("--listen 127.0.0.1:0 "), std::string::npos)
      << "a fresh `yoke up` asks for any port: " << CommandLine(pid);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return !Alive(pid); }, std::chrono::seconds(10)));
  Daemon restarted(argv, cluster.dir() + "/coordinator.log");
  ASSERT_GT(restarted.pid(), 0);

  // cluster.GetJob calls the address of the first coordinator: the
  // restarted one must listen there, and the worker must find it in time.
  ASSERT_TRUE(cluster.WaitForEnd(id, &job, std::chrono::seconds(300)))
      << job.DebugString() << cluster.Logs();
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  EXPECT_EQ(job.attempts_size(), 1) << "the job went on in the same attempt";
  std::vector<int> epochs;
  for (const auto& e : job.history()) epochs.push_back(e.epoch());
  EXPECT_EQ(epochs, std::vector<int>({1, 2, 3})) << "every epoch exactly once";
  EXPECT_TRUE(Alive(restarted.pid()));
}

}  // namespace
}  // namespace yoke::e2e
