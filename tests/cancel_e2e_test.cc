// End to end: cancelling a running job stops its trainer process within the
// stop grace period and leaves the job CANCELLED.
#include <chrono>
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

}  // namespace
}  // namespace yoke::e2e
