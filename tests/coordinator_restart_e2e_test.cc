// End to end: the coordinator is killed with SIGKILL while a job trains and
// restarted on the same store and port. The worker keeps training and
// re-registers; the job finishes SUCCEEDED with its whole history (the
// epochs recorded before the crash among them) and its logs.
//
// This test starts the daemons itself (not `yoke up`) so it can restart the
// coordinator on the same port.
//
// Also: a coordinator started on port 0 with a store file, killed and
// restarted with the very same command line, listens on the same port
// again (coordinator/recorded_port.h); on a fresh one, saying so, when
// another process took it; and an explicit port is never overridden.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
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

// The port in the first "yoke-coordinator listening on HOST:PORT" line of
// `log` after byte `offset`; 0 until there is one.
int PrintedPort(const std::string& log, size_t offset) {
  std::string text = ReadFile(log);
  if (text.size() < offset) return 0;
  text = text.substr(offset);
  const std::string prefix = "yoke-coordinator listening on ";
  size_t p = text.find(prefix);
  size_t end = p == std::string::npos ? p : text.find('\n', p);
  if (end == std::string::npos) return 0;
  std::string address = text.substr(p + prefix.size(), end - p - prefix.size());
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) return 0;
  return port;
}

// Starts `argv` with its output appended to `log`, and waits for the port it
// prints (0 if it prints none within 30 s).
Daemon StartAndReadPort(const std::vector<std::string>& argv, const std::string& log, int* port) {
  const size_t offset = ReadFile(log).size();
  Daemon d(argv, log);
  *port = 0;
  WaitFor([&] { return (*port = PrintedPort(log, offset)) > 0; }, std::chrono::seconds(30));
  return d;
}

TEST(CoordinatorRestartE2ETest, PortZeroIsKeptWhenRestartedWithTheSameCommandLine) {
  const std::string dir = MakeTempDir("yoke_e2e_port");
  const std::string store = dir + "/coordinator.db";
  const std::string log = dir + "/coordinator.log";
  const std::vector<std::string> argv = {
      BinDir() + "/yoke-coordinator", "--listen", "127.0.0.1:0", "--store", store, "--insecure"};
  int first = 0;
  Daemon coordinator = StartAndReadPort(argv, log, &first);
  ASSERT_GT(first, 0) << ReadFile(log);
  EXPECT_EQ(ReadFile(store + ".port"), absl::StrCat(first, "\n"));

  // kill -9, then the identical command line: the same port.
  coordinator.Kill();
  int second = 0;
  coordinator = StartAndReadPort(argv, log, &second);
  EXPECT_EQ(second, first) << ReadFile(log);

  // Taken by someone else meanwhile: a fresh port, with a warning naming
  // the old one, and the fresh one recorded for the next restart.
  coordinator.Kill();
  int blocker = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(first);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(bind(blocker, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << strerror(errno);
  ASSERT_EQ(listen(blocker, 1), 0);
  const size_t offset = ReadFile(log).size();
  int third = 0;
  coordinator = StartAndReadPort(argv, log, &third);
  close(blocker);
  EXPECT_GT(third, 0) << ReadFile(log);
  EXPECT_NE(third, first);
  EXPECT_NE(
      ReadFile(log).find(absl::StrCat("cannot listen on 127.0.0.1:", first, " again"), offset),
      std::string::npos)
      << ReadFile(log);
  EXPECT_EQ(ReadFile(store + ".port"), absl::StrCat(third, "\n"));
  // And it serves there.
  RunResult jobs =
      Sh(absl::StrCat(BinDir(), "/yoke jobs --insecure --coordinator 127.0.0.1:", third), true);
  EXPECT_EQ(jobs.exit_code, 0) << jobs.out << ReadFile(log);

  // An explicit port is never overridden, and not recorded.
  coordinator.Kill();
  const int explicit_port = FreePort();
  std::vector<std::string> explicit_argv = argv;
  explicit_argv[2] = absl::StrCat("127.0.0.1:", explicit_port);
  int fourth = 0;
  coordinator = StartAndReadPort(explicit_argv, log, &fourth);
  EXPECT_EQ(fourth, explicit_port) << ReadFile(log);
  EXPECT_EQ(ReadFile(store + ".port"), absl::StrCat(third, "\n"));

  coordinator.Kill();
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace yoke::e2e
