// Multi-host end to end: the coordinator, the CLI and every worker in a
// network namespace of its own (tests/netns_cluster.h), so that ranks talk
// over veths and a bridge, as on separate machines.
//   - A 3-worker CNN job and a 2-worker x 2-replica MLP job succeed, and
//     their final parameters equal those of the same job on one host. The
//     second runs on firewalled hosts that open only the workers'
//     --data-ports range, and its two ranks per host reduce gradients
//     through shared memory (their trainer logs say so), with Gloo only
//     between the hosts' leaders.
//   - A link cut mid-job fails the attempt at the collective timeout with a
//     reason naming the rank, its worker and its address; once the link is
//     back the job resumes from its checkpoint and succeeds, every epoch in
//     its history exactly once.
//   - A rank that cannot reach a peer fails within a bounded time, naming
//     both ranks, their workers and the address it tried; it never hangs.
// Skips visibly where network namespaces cannot be created (not root).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "engine/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"
#include "tests/netns_cluster.h"

namespace yoke::e2e {
namespace {

using std::chrono::seconds;

#define SKIP_WITHOUT_NETNS(cluster) \
  if (!(cluster).ok()) GTEST_SKIP() << "multi-host test skipped: " << (cluster).skip_reason()

// The parameters in the newest checkpoint of `dir`.
std::vector<float> FinalParameters(const std::string& dir) {
  auto path = engine::LatestCheckpoint(dir);
  if (!path.ok()) {
    ADD_FAILURE() << "no checkpoint in " << dir << ": " << path.status();
    return {};
  }
  auto ck = engine::ReadCheckpoint(*path);
  if (!ck.ok()) {
    ADD_FAILURE() << ck.status();
    return {};
  }
  const engine::Tensor* p = ck->Find("params");
  if (p == nullptr) {
    ADD_FAILURE() << *path << " has no params";
    return {};
  }
  const float* v = p->data<float>();
  return std::vector<float>(v, v + p->numel());
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

// Epoch numbers in the job's history, in order.
// How many lines of the trainer logs under `dir` (recursively) contain
// `text`.
int CountInTrainerLogs(const std::string& dir, const std::string& text) {
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().filename() != "trainer.log") continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) n += line.find(text) != std::string::npos;
  }
  return n;
}

std::vector<int> Epochs(const v1::Job& job) {
  std::vector<int> out;
  for (const auto& e : job.history()) out.push_back(e.epoch());
  return out;
}

// Small enough to finish in seconds on two cores.
std::string MlpArgs(const std::string& ckpt_dir, int workers, int per_worker) {
  return Config("fashion_mnist_mlp.yaml") +
         " --set distribution.workers=" + std::to_string(workers) +
         " --set distribution.devices_per_worker=" + std::to_string(per_worker) +
         " --set training.epochs=2 --set training.threads=1"
         " --set data.train.num_examples=4096 --set data.test.num_examples=1000"
         " --set checkpoint.dir=" +
         ckpt_dir;
}

std::string CnnArgs(const std::string& ckpt_dir) {
  return Config("fashion_mnist_cnn.yaml") +
         " --set distribution.workers=3 --set training.epochs=1 --set training.threads=1"
         " --set training.batch_size=96"
         " --set data.train.num_examples=1920 --set data.test.num_examples=500"
         " --set checkpoint.dir=" +
         ckpt_dir;
}

TEST(MultiHostE2ETest, ThreeWorkerCnnMatchesOneHost) {
  NetnsCluster cluster(3);
  SKIP_WITHOUT_NETNS(cluster);
  ASSERT_TRUE(cluster.StartCoordinator()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorkers(1)) << cluster.Logs();

  // Each worker registered the address of its own host.
  RunResult workers = cluster.Yoke("workers --output json");
  ASSERT_EQ(workers.exit_code, 0) << workers.out;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(workers.out.find(NetnsCluster::HostAddress(i)), std::string::npos) << workers.out;
  }

  const std::string multi = cluster.dir() + "/ckpt-multi";
  std::string id;
  v1::Job job;
  ASSERT_TRUE(cluster.SubmitAndWait(CnnArgs(multi), seconds(600), &id, &job))
      << job.reason() << cluster.Logs();
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).world_size(), 3);
  EXPECT_EQ(Epochs(job), std::vector<int>({1}));
  std::vector<float> got = FinalParameters(multi);

  const std::string one = cluster.dir() + "/ckpt-one";
  TestCluster local(3);
  ASSERT_TRUE(local.ok()) << local.up_output();
  TestCluster::Watched run;
  ASSERT_TRUE(local.SubmitAndWatch(CnnArgs(one), &run)) << run.submit.out;
  ASSERT_EQ(run.job.state(), v1::JOB_SUCCEEDED) << run.job.reason();
  std::vector<float> want = FinalParameters(one);
  // The same ranks, shards and reduction order on both: the only
  // difference is the wire, so the parameters agree to the last bit; 1e-6
  // leaves room for nothing but rounding.
  double diff = MaxAbsDiff(got, want);
  std::printf("3-worker CNN across namespaces: %zu parameters, max |diff| vs one host %.3g\n",
              got.size(), diff);
  EXPECT_LE(diff, 1e-6);
}

TEST(MultiHostE2ETest, TwoWorkersTimesTwoReplicasMlpMatchesOneHost) {
  NetnsCluster cluster(2);
  SKIP_WITHOUT_NETNS(cluster);
  ASSERT_TRUE(cluster.StartCoordinator()) << cluster.Logs();
  // Firewalled hosts: only the data-plane range is open, and it is exactly
  // as large as a host's two ranks in a world of four need: 2 x 3 ports for
  // the Gloo communicator over all ranks, and 1 for the host's leader, which
  // carries the gradients to the other host's leader (the two ranks of a
  // host reduce theirs through shared memory). A trainer that listened
  // anywhere else would never be reached.
  for (int h = 0; h < 2; ++h) ASSERT_TRUE(cluster.Firewall(h, "41000:41006"));
  ASSERT_TRUE(cluster.StartWorkers(2, {"--data-ports", "41000-41006"})) << cluster.Logs();

  const std::string multi = cluster.dir() + "/ckpt-multi";
  std::string id;
  v1::Job job;
  ASSERT_TRUE(cluster.SubmitAndWait(MlpArgs(multi, 2, 2), seconds(600), &id, &job))
      << job.reason() << cluster.Logs();
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.attempts(0).world_size(), 4);
  EXPECT_EQ(Epochs(job), std::vector<int>({1, 2}));
  EXPECT_GE(job.result().test_accuracy(), 0.70);
  // Every rank took the mixed path: shared memory within its host (the
  // namespaces share one /dev/shm, but the hosts' addresses differ, so each
  // host is its own group) and Gloo between the two hosts' leaders.
  EXPECT_EQ(CountInTrainerLogs(cluster.dir() + "/work-h0",
                               "allreduce: shm for 2 local ranks, gloo across 2 host(s)"),
            2)
      << cluster.Logs();
  EXPECT_EQ(CountInTrainerLogs(cluster.dir() + "/work-h1",
                               "allreduce: shm for 2 local ranks, gloo across 2 host(s)"),
            2)
      << cluster.Logs();
  std::vector<float> got = FinalParameters(multi);

  const std::string one = cluster.dir() + "/ckpt-one";
  TestCluster local(2, "--devices-per-worker 2");
  ASSERT_TRUE(local.ok()) << local.up_output();
  TestCluster::Watched run;
  ASSERT_TRUE(local.SubmitAndWatch(MlpArgs(one, 2, 2), &run)) << run.submit.out;
  ASSERT_EQ(run.job.state(), v1::JOB_SUCCEEDED) << run.job.reason();
  std::vector<float> want = FinalParameters(one);
  double diff = MaxAbsDiff(got, want);
  std::printf("2x2 MLP across namespaces: %zu parameters, max |diff| vs one host %.3g\n",
              got.size(), diff);
  EXPECT_LE(diff, 1e-6);
}

// A 2-stage pipeline across two firewalled hosts: each host's trainer runs
// one stage, the activations and their gradients cross between the
// namespaces over Gloo pairs inside the data-port range, and the
// whole-model checkpoint the job ends with equals, to the last bit, that of
// the same job on one host.
TEST(MultiHostE2ETest, TwoStagePipelineAcrossHostsMatchesOneHost) {
  NetnsCluster cluster(2);
  SKIP_WITHOUT_NETNS(cluster);
  ASSERT_TRUE(cluster.StartCoordinator()) << cluster.Logs();
  for (int h = 0; h < 2; ++h) ASSERT_TRUE(cluster.Firewall(h, "41000:41009"));
  ASSERT_TRUE(cluster.StartWorkers(1, {"--data-ports", "41000-41009"})) << cluster.Logs();
  auto args = [](const std::string& ckpt_dir) {
    return Config("fashion_mnist_mlp_pipeline.yaml") +
           " --set training.epochs=1 --set training.threads=1"
           " --set data.train.num_examples=4096 --set data.test.num_examples=1000"
           " --set checkpoint.dir=" +
           ckpt_dir;
  };
  const std::string multi = cluster.dir() + "/ckpt-multi";
  std::string id;
  v1::Job job;
  ASSERT_TRUE(cluster.SubmitAndWait(args(multi), seconds(600), &id, &job))
      << job.reason() << cluster.Logs();
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_EQ(job.attempts_size(), 1);
  const v1::Attempt& a = job.attempts(0);
  EXPECT_EQ(a.world_size(), 2);
  ASSERT_EQ(a.assignments_size(), 2);
  EXPECT_NE(a.assignments(0).worker_id(), a.assignments(1).worker_id());
  EXPECT_EQ(job.result().steps(), 64);
  EXPECT_GE(job.result().test_accuracy(), 0.70);
  std::vector<float> got = FinalParameters(multi);

  const std::string one = cluster.dir() + "/ckpt-one";
  TestCluster local(2);
  ASSERT_TRUE(local.ok()) << local.up_output();
  TestCluster::Watched run;
  ASSERT_TRUE(local.SubmitAndWatch(args(one), &run)) << run.submit.out;
  ASSERT_EQ(run.job.state(), v1::JOB_SUCCEEDED) << run.job.reason();
  std::vector<float> want = FinalParameters(one);
  const double diff = MaxAbsDiff(got, want);
  std::printf("2-stage pipeline across namespaces: %zu parameters, max |diff| vs one host %.3g\n",
              got.size(), diff);
  EXPECT_LE(diff, 1e-6);
}

// A parameter-server job across two firewalled hosts under mutual TLS: each
// host runs a replica and a PS task, pushes and pulls cross between the
// namespaces inside the data-port range, and under sync the job ends with
// exactly the allreduce job's test accuracy and training loss on the same
// hosts (the parameters are bit-equal, trainer/ps_train_test.cc).
TEST(MultiHostE2ETest, ParameterServerJobAcrossHostsEqualsAllreduce) {
  NetnsCluster cluster(2);
  SKIP_WITHOUT_NETNS(cluster);
  ASSERT_TRUE(cluster.StartCoordinator()) << cluster.Logs();
  for (int h = 0; h < 2; ++h) ASSERT_TRUE(cluster.Firewall(h, "41000:41009"));
  ASSERT_TRUE(cluster.StartWorkers(1, {"--data-ports", "41000-41009"})) << cluster.Logs();
  const std::string base = Config("fashion_mnist_mlp_ps.yaml") +
                           " --set training.epochs=1 --set training.threads=1"
                           " --set data.train.num_examples=4096 --set data.test.num_examples=1000";
  v1::Job ps, allreduce;
  std::string id;
  ASSERT_TRUE(cluster.SubmitAndWait(base + " --set distribution.consistency=sync"
                                           " --set distribution.max_staleness=0",
                                    seconds(600), &id, &ps))
      << ps.reason() << cluster.Logs();
  ASSERT_EQ(ps.state(), v1::JOB_SUCCEEDED) << ps.reason() << cluster.Logs();
  const v1::Attempt& a = ps.attempts(0);
  EXPECT_EQ(a.world_size(), 4);
  ASSERT_EQ(a.assignments_size(), 2);
  EXPECT_NE(a.assignments(0).worker_id(), a.assignments(1).worker_id());
  ASSERT_TRUE(cluster.SubmitAndWait(base + " --set distribution.strategy=allreduce"
                                           " --set distribution.parameter_servers=0"
                                           " --set distribution.consistency="
                                           " --set distribution.max_staleness=0",
                                    seconds(600), &id, &allreduce))
      << allreduce.reason() << cluster.Logs();
  ASSERT_EQ(allreduce.state(), v1::JOB_SUCCEEDED) << allreduce.reason() << cluster.Logs();
  std::printf(
      "parameter servers across namespaces: test accuracy %.6f, train loss %.8f; "
      "allreduce %.6f, %.8f\n",
      ps.result().test_accuracy(), ps.result().train_loss(), allreduce.result().test_accuracy(),
      allreduce.result().train_loss());
  EXPECT_EQ(ps.result().steps(), 64);
  EXPECT_GE(ps.result().test_accuracy(), 0.60);  // 64 steps of plain SGD: about 0.66
  EXPECT_EQ(ps.result().test_accuracy(), allreduce.result().test_accuracy());
  EXPECT_EQ(ps.result().train_loss(), allreduce.result().train_loss());
}

TEST(MultiHostE2ETest, LinkCutFailsTheAttemptThenTheJobResumes) {
  NetnsCluster cluster(2);
  SKIP_WITHOUT_NETNS(cluster);
  // A heartbeat deadline well past the collective timeout: the collective
  // watchdog, not the lost-worker check, must catch the cut.
  ASSERT_TRUE(cluster.StartCoordinator({"--heartbeat-deadline", "30s"})) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorkers(1)) << cluster.Logs();

  const std::string ckpt = cluster.dir() + "/ckpt";
  RunResult s = cluster.Yoke("submit " + Config("fashion_mnist_mlp.yaml") +
                             " --set distribution.workers=2 --set training.epochs=2"
                             " --set training.threads=1 --set data.train.num_examples=16384"
                             " --set data.test.num_examples=1000"
                             " --set distribution.collective_timeout_s=4"
                             " --set restart.max_restarts=1 --set checkpoint.every_steps=20"
                             " --set checkpoint.dir=" +
                             ckpt);
  ASSERT_EQ(s.exit_code, 0) << s.out;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  v1::Job job;
  ASSERT_TRUE(WaitFor([&] { return cluster.GetJob(id, &job) && job.progress().step() >= 40; },
                      seconds(180)))
      << job.DebugString() << cluster.Logs();

  ASSERT_TRUE(cluster.SetLink(1, false));
  auto cut = std::chrono::steady_clock::now();
  bool failed = WaitFor(
      [&] {
        return cluster.GetJob(id, &job) && job.attempts_size() >= 1 &&
               job.attempts(0).state() == v1::ATTEMPT_FAILED;
      },
      seconds(60));
  double to_failure = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  ASSERT_TRUE(cluster.SetLink(1, true));
  ASSERT_TRUE(failed) << job.DebugString() << cluster.Logs();
  const std::string& reason = job.attempts(0).reason();
  std::printf("link cut: attempt 1 failed %.1fs later: %s\n", to_failure, reason.c_str());
  EXPECT_LE(to_failure, 4 + 15.0) << "collective_timeout_s is 4";
  // "... ranks 1 did not answer within 3s (dead or unreachable) (worker w-2
  // at 10.77.0.12)": the rank, its worker and the worker's address.
  EXPECT_TRUE(std::regex_search(reason, std::regex(R"(ranks? 1\b)"))) << reason;
  EXPECT_NE(reason.find("w-2 at " + NetnsCluster::HostAddress(1)), std::string::npos) << reason;

  ASSERT_TRUE(cluster.WaitForState(id, seconds(300), &job)) << job.DebugString();
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  EXPECT_EQ(job.attempts_size(), 2);
  EXPECT_EQ(Epochs(job), std::vector<int>({1, 2})) << "every epoch exactly once";
}

TEST(MultiHostE2ETest, RankThatCannotReachItsPeerFailsPromptlyNamingIt) {
  NetnsCluster cluster(2);
  SKIP_WITHOUT_NETNS(cluster);
  ASSERT_TRUE(cluster.StartCoordinator()) << cluster.Logs();
  ASSERT_TRUE(cluster.StartWorkers(1)) << cluster.Logs();
  // h1 (w-2) reaches the coordinator, but not h0 (w-1): its packets to
  // 10.77.0.11 are refused at once by its own routing table.
  RunResult r = Sh(
      "ip -n " + cluster.Ns("h1") + " route add prohibit " + NetnsCluster::HostAddress(0) + "/32",
      true);
  ASSERT_EQ(r.exit_code, 0) << r.out;

  std::string id;
  v1::Job job;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(cluster.SubmitAndWait(Config("fashion_mnist_mlp.yaml") +
                                        " --set distribution.workers=2 --set training.threads=1"
                                        " --set distribution.collective_timeout_s=10"
                                        " --set restart.max_restarts=0",
                                    seconds(120), &id, &job))
      << job.DebugString() << cluster.Logs();
  double seconds_to_fail =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(job.state(), v1::JOB_FAILED) << job.DebugString();
  std::printf("unreachable peer: failed after %.1fs: %s\n", seconds_to_fail, job.reason().c_str());
  EXPECT_LE(seconds_to_fail, 60);
  // "rank 1 on w-2 could not connect to rank 0 at 10.77.0.11:PORT (w-1): ..."
  EXPECT_NE(job.reason().find("could not connect"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find("w-2"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find("w-1"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find(NetnsCluster::HostAddress(0) + ":"), std::string::npos)
      << job.reason();
}

}  // namespace
}  // namespace yoke::e2e
