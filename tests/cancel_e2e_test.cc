// End to end: cancelling a running job stops its trainer process within the
// stop grace period and leaves the job CANCELLED; a trainer far from a step
// boundary still stops within its own --stop-grace.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

TEST(CancelE2ETest, CancelStopsTheTrainerAndMarksTheJobCancelled) {
  TestCluster cluster(1);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  ASSERT_EQ(cluster.state().worker_pids.size(), 1u);
  const pid_t worker = cluster.state().worker_pids[0];

  // Long enough that it is still running when cancelled.
  RunResult s = cluster.Yoke("submit " + Config("fashion_mnist_mlp.yaml") +
                             " --set training.epochs=50 --set training.threads=1");
  ASSERT_EQ(s.exit_code, 0) << s.out;
  std::string id = s.out.substr(0, s.out.find('\n'));

  v1::Job job;
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.GetJob(id, &job) && job.state() == v1::JOB_RUNNING &&
               job.progress().step() > 0;
      },
      std::chrono::seconds(60)))
      << "state " << job.state() << " " << job.reason() << "\n"
      << cluster.Logs();

  std::vector<pid_t> trainers = ChildrenOf(worker, "yoke-trainer");
  ASSERT_EQ(trainers.size(), 1u) << "the worker runs one trainer process";
  const pid_t trainer = trainers[0];
  ASSERT_TRUE(Alive(trainer));

  auto t0 = std::chrono::steady_clock::now();
  RunResult c = cluster.Yoke("cancel " + id, true);
  ASSERT_EQ(c.exit_code, 0) << c.out;
  EXPECT_NE(c.out.find("CANCELLED"), std::string::npos) << c.out;

  // The worker's stop grace is 10 s (SIGTERM, then SIGKILL); a heartbeat
  // (1 s) carries the cancel to it.
  EXPECT_TRUE(WaitFor([&] { return !Alive(trainer); }, std::chrono::seconds(15)))
      << "trainer " << trainer << " still runs\n"
      << cluster.Logs();
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trainer gone %.1fs after the cancel\n", took);

  ASSERT_TRUE(cluster.GetJob(id, &job));
  EXPECT_EQ(job.state(), v1::JOB_CANCELLED);
  EXPECT_FALSE(job.reason().empty());
  ASSERT_GE(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(job.attempts_size() - 1).state(), v1::ATTEMPT_CANCELLED);

  // watch on a cancelled job: exit 1 with the reason.
  RunResult w = cluster.Yoke("watch " + id, true);
  EXPECT_EQ(w.exit_code, 1);
  EXPECT_NE(w.out.find("CANCELLED"), std::string::npos) << w.out;

  // The worker is free again, and the cancel of an unknown job is NOT_FOUND.
  EXPECT_TRUE(WaitFor(
      [&] {
        RunResult r = cluster.Yoke("workers --output json");
        v1::ListWorkersResponse ws;
        return r.exit_code == 0 && ParseJson("{\"workers\":" + r.out + "}", &ws) &&
               ws.workers_size() == 1 && ws.workers(0).running_size() == 0;
      },
      std::chrono::seconds(10)));
  RunResult unknown = cluster.Yoke("cancel job-does-not-exist", true);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.out;
}

// Issue 30: SIGTERM while the trainer builds the first epoch's shuffle order
// of 10^8 examples (800 MB, several seconds) and so reaches no step boundary:
// it exits 143 within --stop-grace, saying why, instead of running on until
// its worker's SIGKILL.
TEST(CancelE2ETest, ATrainerFarFromAStepBoundaryStopsWithinItsGrace) {
  const std::string dir = MakeTempDir("stop-grace");
  const std::string job = dir + "/job.yaml";
  std::ofstream(job) << "model: {zoo: mlp, hidden: [4]}\n"
                        "data:\n"
                        "  train: {format: synthetic, shape: [1], num_classes: 2, "
                        "num_examples: 100000000}\n"
                        "training: {epochs: 1, batch_size: 64, threads: 1, optimizer: {type: sgd, "
                        "lr: 0.1}}\n";
  const std::string out = dir + "/out", err = dir + "/err";
  const std::string bin = BinDir() + "/yoke-trainer";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    execl(bin.c_str(), bin.c_str(), job.c_str(), "--output", "events", "--stop-grace", "1s",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  auto read = [](const std::string& path) {
    std::stringstream ss;
    ss << std::ifstream(path).rdbuf();
    return ss.str();
  };
  // Its first info line comes as Run starts, before the shuffle order.
  const bool started = WaitFor([&] { return read(out).find("\"info\"") != std::string::npos; },
                               std::chrono::seconds(60));
  if (!started) kill(pid, SIGKILL);
  ASSERT_TRUE(started) << read(out) << read(err);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trainer gone %.2fs after SIGTERM (--stop-grace 1s)\n", took);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 143) << read(err);
  EXPECT_LT(took, 2.0) << read(err);
  EXPECT_NE(read(err).find("no step boundary within 1s (--stop-grace)"), std::string::npos)
      << read(err);
}

}  // namespace
}  // namespace yoke::e2e
