// End to end: the coordinator is killed with SIGKILL while a job trains and
// restarted on the same store and port. The worker keeps training and
// re-registers; the job finishes SUCCEEDED with its whole history (the
// epochs recorded before the crash among them) and its logs.
//
// This test starts the daemons itself (not `yoke up`) so it can restart the
// coordinator on the same port.
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(CoordinatorRestartE2ETest, JobSurvivesCoordinatorKill9) {
  const std::string dir = MakeTempDir("yoke_e2e_restart");
  const std::string addr = absl::StrCat("127.0.0.1:", FreePort());
  const std::string store = dir + "/coordinator.db";
  const std::string bin = BinDir();
  // Mutual TLS, with credentials made by `yoke certs` as an operator would.
  const std::string tls = dir + "/tls";
  ASSERT_EQ(IssueTestCerts(tls, {"127.0.0.1"}, {"w-1"}), "");
  auto start_coordinator = [&] {
    return Daemon({bin + "/yoke-coordinator", "--listen", addr, "--store", store, "--tls-dir",
                   tls + "/coordinator"},
                  dir + "/coordinator.log");
  };
  auto yoke = [&](const std::string& args) {
    return Sh("YOKE_STATE_DIR=" + dir + " " + bin + "/yoke " + args + " --coordinator " + addr +
                  " --tls-dir " + tls + "/admin",
              true);
  };
  auto logs = [&] {
    return "==== coordinator.log\n" + ReadFile(dir + "/coordinator.log") + "\n==== worker.log\n" +
           ReadFile(dir + "/worker.log");
  };

  Daemon coordinator = start_coordinator();
  ASSERT_GT(coordinator.pid(), 0);
  ASSERT_TRUE(WaitFor([&] { return yoke("workers").exit_code == 0; }, std::chrono::seconds(30)))
      << logs();
  Daemon worker({bin + "/yoke-worker", "--coordinator", addr, "--cpu-replicas", "1", "--work-dir",
                 dir + "/worker", "--tls-dir", tls + "/w-1"},
                dir + "/worker.log");
  ASSERT_GT(worker.pid(), 0);

  // Short epochs (20,000 of the 60,000 images) so some finish before the
  // crash and more after it. The first hidden layer is 8x wider than the
  // config's, so the nine epochs after the first outlast the ~1.5 s outage
  // by a wide margin even on a fast, idle machine (the config's own MLP
  // once finished during it).
  const int kEpochs = 10;
  RunResult s = yoke("submit " + Config("fashion_mnist_mlp.yaml") +
                     " --set training.epochs=" + std::to_string(kEpochs) +
                     " --set data.train.num_examples=20000 --set data.test.num_examples=2000"
                     " --set model.layers[1].dense.units=2048 --set training.threads=1");
  ASSERT_EQ(s.exit_code, 0) << s.out << logs();
  std::string id = s.out.substr(0, s.out.find('\n'));

  // A `yoke watch` that runs through the crash: it must reconnect.
  RunResult watch;
  std::thread watcher([&] { watch = yoke("watch " + id); });

  v1::Job before;
  auto get = [&](v1::Job* job) {
    RunResult r = yoke("get " + id + " --output json");
    return r.exit_code == 0 && ParseJson(r.out, job);
  };
  bool got =
      WaitFor([&] { return get(&before) && before.history_size() >= 1; }, std::chrono::seconds(90));
  if (!got) {
    coordinator.Kill();  // ends the watcher
    watcher.join();
    FAIL() << "no epoch finished; state " << before.state() << "\n" << logs();
  }
  RunResult logs_before = yoke("logs " + id);
  std::vector<pid_t> trainers = ChildrenOf(worker.pid(), "yoke-trainer");

  // kill -9, then a restart on the same store and port.
  coordinator.Kill();
  EXPECT_EQ(before.state(), v1::JOB_RUNNING);
  EXPECT_LT(before.history_size(), kEpochs) << "the job must still run at the crash";
  EXPECT_EQ(logs_before.exit_code, 0);
  EXPECT_EQ(trainers.size(), 1u);
  EXPECT_NE(yoke("jobs").exit_code, 0);  // nobody answers now
  std::this_thread::sleep_for(std::chrono::seconds(1));
  // No ASSERT until the watcher is joined: a joinable thread must not be
  // destroyed.
  coordinator = start_coordinator();
  EXPECT_GT(coordinator.pid(), 0);
  // The worker kept training while the coordinator was gone.
  EXPECT_TRUE(!trainers.empty() && Alive(trainers[0]))
      << "the trainer finished during the outage; make the job longer";

  watcher.join();
  EXPECT_EQ(watch.exit_code, 0) << watch.out << logs();
  EXPECT_NE(watch.out.find("reconnecting"), std::string::npos) << watch.out;
  v1::Job after;
  ASSERT_TRUE(get(&after)) << logs();
  EXPECT_EQ(after.state(), v1::JOB_SUCCEEDED) << after.reason();
  EXPECT_EQ(after.result().epochs(), kEpochs);
  // Every epoch is there, and those recorded before the crash unchanged.
  ASSERT_EQ(after.history_size(), kEpochs);
  for (int i = 0; i < before.history_size(); ++i) {
    EXPECT_EQ(after.history(i).epoch(), before.history(i).epoch());
    EXPECT_EQ(after.history(i).test_accuracy(), before.history(i).test_accuracy());
  }
  // The same attempt ran through the crash: the trainer was not restarted.
  EXPECT_EQ(after.attempts_size(), 1) << logs();
  // The log lines from before the crash survive too.
  RunResult logs_after = yoke("logs " + id);
  ASSERT_EQ(logs_after.exit_code, 0);
  EXPECT_GE(logs_after.out.size(), logs_before.out.size());
  EXPECT_EQ(logs_after.out.compare(0, logs_before.out.size(), logs_before.out), 0)
      << "before:\n"
      << logs_before.out << "\nafter:\n"
      << logs_after.out;

  worker.Kill();
  coordinator.Kill();
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace yoke::e2e
