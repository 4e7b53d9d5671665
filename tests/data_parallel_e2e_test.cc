// End to end, synchronous data parallelism (issue 4) on `yoke up --workers 2`:
// a 2-worker MLP job trains to the single-process accuracy; a 2-worker job
// whose rank-1 trainer is killed fails promptly, naming the rank, while the
// other rank's trainer is stopped and both daemons stay up; and one whose
// rank 1 freezes fails at the collective timeout with a hang report naming
// rank 1's worker and every rank's last completed collective.
// The 2-worker CNN run is data_parallel_cnn_e2e_test.cc (label `slow`).
#include <chrono>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// The yoke-trainer children of the cluster's workers.
std::vector<pid_t> Trainers(const TestCluster& cluster) {
  std::vector<pid_t> out;
  for (int w : cluster.state().worker_pids) {
    for (pid_t t : ChildrenOf(w, "yoke-trainer")) out.push_back(t);
  }
  return out;
}

TEST(DataParallelE2ETest, MlpOnTwoWorkersReachesTheSingleProcessAccuracy) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  // One thread per trainer: the two ranks share the machine's two cores.
  TestCluster::Watched run;
  ASSERT_TRUE(cluster.SubmitAndWatch(Config("fashion_mnist_mlp.yaml") +
                                         " --set distribution.workers=2 --set training.epochs=1"
                                         " --set training.threads=1 --set name=mlp-dp",
                                     &run))
      << run.submit.out;
  const std::string& id = run.id;
  const v1::Job& job = run.job;
  EXPECT_EQ(run.watch.exit_code, 0) << run.watch.out;
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_EQ(job.attempts_size(), 1);
  const v1::Attempt& a = job.attempts(0);
  EXPECT_EQ(a.world_size(), 2);
  ASSERT_EQ(a.assignments_size(), 2);
  EXPECT_NE(a.assignments(0).worker_id(), a.assignments(1).worker_id());
  // Global batch 64 split over two ranks: the same 938 steps as one process.
  EXPECT_EQ(job.result().steps(), 938);
  EXPECT_EQ(job.result().epochs(), 1);
  EXPECT_GE(job.result().test_accuracy(), 0.82);
  EXPECT_EQ(job.history_size(), 1) << "one epoch, reported once (by rank 0)";
  std::printf("%s: 2 workers, test accuracy %.4f, %.0f samples/s, %.0fs submit to end\n",
              id.c_str(), job.result().test_accuracy(), job.result().samples_per_second(),
              run.seconds);

  // Both ranks' lines reach the job's log.
  RunResult logs = cluster.Yoke("logs " + id + " --output json");
  EXPECT_EQ(logs.exit_code, 0);
  std::set<int> ranks;
  std::istringstream lines(logs.out);
  for (std::string line; std::getline(lines, line);) {
    v1::LogLine l;
    if (ParseJson(line, &l)) ranks.insert(l.rank());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1})) << logs.out.substr(0, 2000);
}

// Submits a long 2-worker MLP job (`extra` --set flags added), waits until
// it trains, and finds its two trainers.
void StartLongJob(const TestCluster& cluster, const std::string& extra, std::string* id,
                  pid_t* rank0, pid_t* rank1) {
  RunResult s = cluster.Yoke("submit " + Config("fashion_mnist_mlp.yaml") +
                             " --set distribution.workers=2 --set training.epochs=50"
                             " --set training.threads=1 --set restart.max_restarts=0 " +
                             extra);
  ASSERT_EQ(s.exit_code, 0) << s.out;
  *id = FirstLine(s.out);
  v1::Job job;
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.GetJob(*id, &job) && job.state() == v1::JOB_RUNNING &&
               job.progress().step() > 20;
      },
      std::chrono::seconds(90)))
      << "state " << job.state() << " " << job.reason() << "\n"
      << cluster.Logs();
  std::vector<pid_t> trainers = Trainers(cluster);
  ASSERT_EQ(trainers.size(), 2u) << "one trainer per worker";
  *rank0 = *rank1 = 0;
  for (pid_t t : trainers) {
    (CommandLine(t).find("--rank 1 ") != std::string::npos ? *rank1 : *rank0) = t;
  }
  ASSERT_NE(*rank1, 0) << CommandLine(trainers[0]) << " / " << CommandLine(trainers[1]);
  ASSERT_NE(*rank0, 0);
}

TEST(DataParallelE2ETest, KilledRankFailsTheJobStopsTheOtherRankAndDaemonsStayUp) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  std::string id;
  pid_t survivor = 0, victim = 0;
  ASSERT_NO_FATAL_FAILURE(StartLongJob(cluster, "", &id, &survivor, &victim));
  v1::Job job;

  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  // The worker sees the exit at once and reports it with its next heartbeat
  // (1 s): well inside the heartbeat deadline (10 s) and any collective
  // timeout.
  ASSERT_TRUE(WaitFor([&] { return cluster.GetJob(id, &job) && job.state() == v1::JOB_FAILED; },
                      std::chrono::seconds(15)))
      << "state " << job.state() << " " << job.reason() << "\n"
      << cluster.Logs();
  const double failed_after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Usually rank 1's own exit ("trainer of rank 1 on w-2 killed by signal
  // 9"); if rank 0 noticed the closed connection first, its report names
  // rank 1 instead.
  EXPECT_TRUE(std::regex_search(job.reason(), std::regex("\\branks? 1\\b"))) << job.reason();
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).state(), v1::ATTEMPT_FAILED);

  // Rank 0's trainer is no longer desired: SIGTERM, SIGKILL after the 10 s
  // grace at the latest.
  EXPECT_TRUE(WaitFor([&] { return !Alive(survivor); }, std::chrono::seconds(15)))
      << "rank 0's trainer " << survivor << " still runs\n"
      << cluster.Logs();
  const double stopped_after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("job FAILED %.1fs after kill -9 of rank 1 (\"%s\"); rank 0 stopped after %.1fs\n",
              failed_after, job.reason().c_str(), stopped_after);

  // Both daemons stay up, alive to the coordinator, running nothing.
  for (int w : cluster.state().worker_pids) EXPECT_TRUE(Alive(w)) << "worker " << w;
  EXPECT_TRUE(WaitFor(
      [&] {
        RunResult r = cluster.Yoke("workers --output json");
        v1::ListWorkersResponse ws;
        if (r.exit_code != 0 || !ParseJson("{\"workers\":" + r.out + "}", &ws)) return false;
        if (ws.workers_size() != 2) return false;
        for (const auto& wk : ws.workers()) {
          if (!wk.alive() || wk.running_size() != 0) return false;
        }
        return true;
      },
      std::chrono::seconds(10)))
      << cluster.Logs();

  // watch on the failed job: exit 1 with the reason.
  RunResult w = cluster.Yoke("watch " + id, true);
  EXPECT_EQ(w.exit_code, 1);
  EXPECT_NE(w.out.find("rank 1"), std::string::npos) << w.out;
}

TEST(DataParallelE2ETest, HungRankIsNamedWithItsWorkerAndEveryRanksLastCollective) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  std::string id;
  pid_t rank0 = 0, rank1 = 0;
  ASSERT_NO_FATAL_FAILURE(
      StartLongJob(cluster, "--set distribution.collective_timeout_s=5", &id, &rank0, &rank1));
  // A frozen rank: its daemon keeps heartbeating, so only rank 0's watchdog
  // can notice (after the 5 s collective timeout and the 3 s hang check).
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(rank1, SIGSTOP), 0);
  v1::Job job;
  const bool failed =
      WaitFor([&] { return cluster.GetJob(id, &job) && job.state() == v1::JOB_FAILED; },
              std::chrono::seconds(40));
  kill(rank1, SIGCONT);  // let it take the daemon's SIGTERM
  ASSERT_TRUE(failed) << "state " << job.state() << " " << job.reason() << "\n" << cluster.Logs();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("job FAILED %.1fs after SIGSTOP of rank 1: %s\n", took, job.reason().c_str());
  const std::string w = job.attempts(0).assignments(1).worker_id();
  EXPECT_TRUE(std::regex_search(
      // Gloo's own timeout ("Read timeout") or the watchdog's ("timed out
      // after 5s"), whichever fires first; then the hang check's verdict.
      job.reason(), std::regex("^trainer of rank 0 on w-[0-9]+ exited with code 1: .*on rank 0 "
                               "of 2.*ranks? 1 .*\\(worker " +
                               w + " at 127\\.0\\.0\\.1\\)")))
      << job.reason();
  EXPECT_TRUE(std::regex_search(
      job.reason(), std::regex("last collective completed per rank: r0=[0-9]+ r1=[0-9]+$")))
      << job.reason();
  EXPECT_TRUE(WaitFor([&] { return !Alive(rank0) && !Alive(rank1); }, std::chrono::seconds(15)))
      << cluster.Logs();
  for (int wp : cluster.state().worker_pids) EXPECT_TRUE(Alive(wp)) << "worker " << wp;
}

}  // namespace
}  // namespace yoke::e2e
