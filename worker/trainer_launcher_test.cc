// TrainerLauncher with real child processes: the real yoke-trainer (built
// next to this test) on tiny Fashion-MNIST jobs, and small shell scripts for
// the cases a trainer should never produce (ignoring SIGTERM, dying on a
// signal, garbage on stdout).
#include "worker/trainer_launcher.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec_binary.h"

namespace yoke::worker {
namespace {

std::string BinDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  buf[n > 0 ? n : 0] = '\0';
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

std::string SourceDir() {
  const char* d = std::getenv("YOKE_SOURCE_DIR");
  return d ? d : ".";
}

// Writes the MLP example job with `overrides` as a binary spec file, the way
// the daemon does, and returns its path (for --spec-file).
std::string WriteMlpSpec(const std::string& dir, const std::vector<std::string>& overrides) {
  auto spec = common::LoadJobSpecFile(SourceDir() + "/configs/fashion_mnist_mlp.yaml", overrides);
  EXPECT_TRUE(spec.ok()) << spec.status();
  std::string path = dir + "/job.pb";
  absl::Status s = common::WriteJobSpecFile(path, *spec);
  EXPECT_TRUE(s.ok()) << s;
  return path;
}

std::unique_ptr<TrainerLauncher> StartOrDie(const TrainerLauncherOptions& o) {
  auto p = TrainerLauncher::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

TrainerLauncherOptions Shell(const std::string& script) {
  TrainerLauncherOptions o;
  o.binary = "/bin/sh";
  o.args = {"-c", script};
  return o;
}

std::string AllLogs(const TrainerLauncher& p) {
  std::vector<std::string> lines;
  for (const auto& l : p.LogsSince(0, 1 << 20)) lines.push_back(l.text);
  return absl::StrJoin(lines, "\n");
}

bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return cond();
}

TEST(TrainerLauncherTest, RealTrainerRunsTinyJobToTheEnd) {
  common::TempDir tmp("yoke_trainer_launcher");  // removed with its files at the end
  std::string dir = tmp.path();
  // 640 examples at batch 64: 10 steps per epoch, 2 epochs.
  std::string spec = WriteMlpSpec(
      dir, {"data.train.num_examples=640", "data.test.num_examples=500", "training.epochs=2"});
  TrainerLauncherOptions o;
  o.binary = BinDir() + "/yoke-trainer";
  o.args = {"--spec-file", spec, "--output", "events"};
  o.work_dir = dir;
  auto p = StartOrDie(o);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForExit(absl::Seconds(120))) << AllLogs(*p);
  TrainerState s = p->State();
  EXPECT_EQ(s.exit_code, 0) << s.reason << "\n" << AllLogs(*p);
  EXPECT_EQ(s.reason, "");
  EXPECT_TRUE(s.reported);
  ASSERT_TRUE(s.has_result);
  EXPECT_EQ(s.result.steps(), 20);
  EXPECT_EQ(s.result.epochs(), 2);
  ASSERT_EQ(s.epochs.size(), 2u);
  EXPECT_EQ(s.epochs[0].epoch(), 1);
  EXPECT_EQ(s.epochs[1].epoch(), 2);
  // The epoch events and the result agree on the final test accuracy.
  EXPECT_DOUBLE_EQ(s.epochs[1].test_accuracy(), s.result.test_accuracy());
  EXPECT_GT(s.result.test_accuracy(), 0.3);  // 10 classes: chance is 0.1
  // Epochs the coordinator acknowledged are dropped from the front, and
  // the snapshot counts them; forgetting fewer than are gone does nothing.
  p->ForgetEpochs(1);
  p->ForgetEpochs(0);
  TrainerState after = p->State();
  ASSERT_EQ(after.epochs.size(), 1u);
  EXPECT_EQ(after.epochs_forgotten, 1u);
  EXPECT_EQ(after.epochs[0].epoch(), 2);
  p->ForgetEpochs(5);
  EXPECT_TRUE(p->State().epochs.empty());
  EXPECT_EQ(p->State().epochs_forgotten, 2u);
  ASSERT_TRUE(s.has_progress);
  EXPECT_EQ(s.progress.step(), 20);  // the last step of an epoch is always reported
  EXPECT_EQ(s.progress.total_steps(), 20);
  // Human progress went to stderr and became log lines, numbered from 1.
  auto logs = p->LogsSince(0, 1000);
  ASSERT_FALSE(logs.empty());
  EXPECT_EQ(logs.front().seq, 1);
  EXPECT_EQ(logs.back().seq, s.last_log_seq);
  EXPECT_NE(AllLogs(*p).find("epoch 2 done"), std::string::npos) << AllLogs(*p);
}

TEST(TrainerLauncherTest, StopEndsARunningTrainerWithinTheGrace) {
  common::TempDir tmp("yoke_trainer_launcher");  // removed with its files at the end
  std::string dir = tmp.path();
  std::string spec = WriteMlpSpec(dir, {"training.epochs=100"});
  TrainerLauncherOptions o;
  o.binary = BinDir() + "/yoke-trainer";
  o.args = {"--spec-file", spec, "--output", "events"};
  auto p = StartOrDie(o);
  ASSERT_NE(p, nullptr);
  // Wait until it trains (its first event comes from the training loop,
  // after its signal handler is installed), so SIGTERM reaches the trainer's
  // own handler rather than killing it during start-up.
  ASSERT_TRUE(WaitFor([&] { return p->State().reported; }, absl::Seconds(60))) << AllLogs(*p);
  const pid_t pid = p->pid();
  const absl::Duration grace = absl::Seconds(10);
  absl::Time t0 = absl::Now();
  p->Stop(grace);
  ASSERT_TRUE(p->WaitForExit(grace));
  EXPECT_LT(absl::Now() - t0, grace);
  TrainerState s = p->State();
  EXPECT_EQ(s.exit_code, 128 + SIGTERM) << s.reason;  // the trainer's own exit on SIGTERM
  EXPECT_NE(s.reason.find("stopped on request"), std::string::npos) << s.reason;
  EXPECT_TRUE(s.has_result);    // a stopped trainer still reports what it did
  EXPECT_EQ(kill(pid, 0), -1);  // gone, and reaped
}

TEST(TrainerLauncherTest, BadSpecExitsTwoWithTheReason) {
  common::TempDir tmp("yoke_trainer_launcher");  // removed with its files at the end
  std::string dir = tmp.path();
  std::string spec = dir + "/bad.yaml";
  std::ofstream(spec) << "model: {zoo: mlp}\ntraining: {epochs: 1, batch_size: -4}\n";
  TrainerLauncherOptions o;
  o.binary = BinDir() + "/yoke-trainer";
  o.args = {spec, "--output", "events"};
  auto p = StartOrDie(o);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForExit(absl::Seconds(30)));
  TrainerState s = p->State();
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_NE(s.reason.find("batch_size"), std::string::npos) << s.reason;
  EXPECT_EQ(s.reason, s.error);  // the reason is the trainer's {"error"} message
  EXPECT_FALSE(s.has_result);
}

// A binary spec is read within bounds: anything but a regular file holding
// a JobSpec is refused before training, with exit 2 and the file's name.
TEST(TrainerLauncherTest, SpecFileThatIsNoJobSpecExitsTwoNamingTheFile) {
  common::TempDir tmp("yoke_trainer_launcher");  // removed with its files at the end
  std::string dir = tmp.path();
  const std::string fifo = dir + "/fifo.pb";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = dir + "/big.pb";
  std::ofstream(big).close();
  ASSERT_EQ(truncate(big.c_str(), common::kMaxJobSpecBytes + 1), 0);  // sparse
  const std::string yaml = dir + "/job.yaml";
  std::ofstream(yaml) << "name: not-binary\nmodel: {zoo: mlp}\n";
  const std::string empty = dir + "/empty.pb";
  std::ofstream(empty).close();
  struct Case {
    std::string path, why;
  };
  const std::vector<Case> cases = {
      {dir, "not a regular file"},
      {fifo, "not a regular file"},
      {big, absl::StrCat("at most ", common::kMaxJobSpecBytes, " bytes")},
      {yaml, "not a serialized yoke.v1.JobSpec"},
      {empty, "empty"},
      {dir + "/missing.pb", "No such file"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    TrainerLauncherOptions o;
    o.binary = BinDir() + "/yoke-trainer";
    o.args = {"--spec-file", c.path, "--output", "events"};
    auto p = StartOrDie(o);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(p->WaitForExit(absl::Seconds(30)));
    TrainerState s = p->State();
    EXPECT_EQ(s.exit_code, 2) << s.reason;
    EXPECT_NE(s.reason.find(c.path), std::string::npos) << s.reason;
    EXPECT_NE(s.reason.find(c.why), std::string::npos) << s.reason;
  }
}

// `--spec-file -` reads the spec from stdin, with the same bound.
TEST(TrainerLauncherTest, SpecFromStdinIsReadWithinTheBound) {
  common::TempDir tmp("yoke_trainer_launcher");  // removed with its files at the end
  std::string dir = tmp.path();
  std::string spec = WriteMlpSpec(dir, {"data.train.images=/nonexistent/images.gz"});
  const std::string trainer = BinDir() + "/yoke-trainer";
  // The spec parsed: what fails is the dataset it names, on this machine.
  auto p =
      StartOrDie(Shell(absl::StrCat("exec ", trainer, " --spec-file - --output events < ", spec)));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForExit(absl::Seconds(30)));
  EXPECT_EQ(p->State().exit_code, 2) << p->State().reason;
  EXPECT_NE(p->State().reason.find("/nonexistent/images.gz"), std::string::npos)
      << p->State().reason;

  p = StartOrDie(Shell(absl::StrCat("head -c ", common::kMaxJobSpecBytes + 1, " /dev/zero | exec ",
                                    trainer, " --spec-file - --output events")));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForExit(absl::Seconds(30)));
  EXPECT_EQ(p->State().exit_code, 2) << p->State().reason;
  EXPECT_NE(p->State().reason.find("standard input"), std::string::npos) << p->State().reason;
  EXPECT_NE(p->State().reason.find(absl::StrCat("at most ", common::kMaxJobSpecBytes)),
            std::string::npos)
      << p->State().reason;
}

// A multi-rank world needs a rendezvous; without one the trainer refuses to
// start and says what is missing, rather than waiting for peers forever.
TEST(TrainerLauncherTest, MultiRankWorldWithoutRendezvousIsRefusedClearly) {
  common::TempDir tmp("yoke_trainer_launcher");  // removed with its files at the end
  std::string dir = tmp.path();
  std::string spec = WriteMlpSpec(dir, {});
  TrainerLauncherOptions o;
  o.binary = BinDir() + "/yoke-trainer";
  o.args = {"--spec-file", spec, "--output", "events", "--rank", "0", "--world-size", "2"};
  auto p = StartOrDie(o);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForExit(absl::Seconds(30)));
  TrainerState s = p->State();
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_NE(s.reason.find("--coordinator HOST:PORT"), std::string::npos) << s.reason;
  EXPECT_NE(s.reason.find("--job-id"), std::string::npos) << s.reason;
}

TEST(TrainerLauncherTest, ChildIgnoringSigtermIsKilledAfterTheGrace) {
  // `sleep` inherits the ignored SIGTERM; it too must die (group kill), or
  // its open stdout would hold the monitor for the drain timeout.
  auto p = StartOrDie(Shell("trap '' TERM; echo ready >&2; sleep 60; echo survived >&2"));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(WaitFor([&] { return p->State().last_log_seq >= 1; }, absl::Seconds(10)));
  const absl::Duration grace = absl::Milliseconds(500);
  absl::Time t0 = absl::Now();
  p->Stop(grace);
  ASSERT_TRUE(p->WaitForExit(absl::Seconds(10)));
  absl::Duration took = absl::Now() - t0;
  EXPECT_GE(took, grace);
  EXPECT_LT(took, grace + absl::Milliseconds(1500));
  TrainerState s = p->State();
  EXPECT_EQ(s.exit_code, 128 + SIGKILL);
  EXPECT_NE(s.reason.find("killed with SIGKILL"), std::string::npos) << s.reason;
  EXPECT_EQ(AllLogs(*p).find("survived"), std::string::npos);
}

TEST(TrainerLauncherTest, ParsesEventLinesAndKeepsOtherOutputAsLogs) {
  auto p =
      StartOrDie(Shell("echo '{\"info\": \"hello\"}';"
                       "echo '{\"step\": {\"step\": \"7\", \"loss\": 0.5, \"new_field\": 1}}';"
                       "echo 'plain stdout';"
                       "echo '{not json';"
                       "echo '{\"epoch\": {\"epoch\": 1, \"test_accuracy\": 0.75}}';"
                       "echo 'to stderr' >&2;"
                       "echo '{\"error\": \"boom\"}';"
                       "exit 1"));
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForExit(absl::Seconds(10)));
  TrainerState s = p->State();
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_EQ(s.reason, "boom");
  EXPECT_TRUE(s.reported);
  ASSERT_TRUE(s.has_progress);
  EXPECT_EQ(s.progress.step(), 7);
  EXPECT_DOUBLE_EQ(s.progress.loss(), 0.5);
  ASSERT_EQ(s.epochs.size(), 1u);
  EXPECT_DOUBLE_EQ(s.epochs[0].test_accuracy(), 0.75);
  // Three non-event lines; their relative order between the two pipes is
  // not defined, so compare as a set.
  auto logs = p->LogsSince(0, 100);
  ASSERT_EQ(logs.size(), 3u);
  std::set<std::string> texts;
  for (const auto& l : logs) texts.insert(l.text);
  EXPECT_EQ(texts, (std::set<std::string>{"plain stdout", "{not json", "to stderr"}));
}

TEST(TrainerLauncherTest, LogBufferIsBoundedAndNumbered) {
  TrainerLauncherOptions o =
      Shell("i=1; while [ $i -le 50 ]; do echo line$i >&2; i=$((i+1)); done");
  o.max_log_lines = 10;
  auto p = StartOrDie(o);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForExit(absl::Seconds(10)));
  EXPECT_EQ(p->State().last_log_seq, 50);
  auto all = p->LogsSince(0, 100);
  ASSERT_EQ(all.size(), 10u);
  EXPECT_EQ(all.front().seq, 41);
  EXPECT_EQ(all.front().text, "line41");
  EXPECT_EQ(all.back().text, "line50");
  auto some = p->LogsSince(45, 2);
  ASSERT_EQ(some.size(), 2u);
  EXPECT_EQ(some[0].seq, 46);
  EXPECT_EQ(some[1].text, "line47");
  EXPECT_TRUE(p->LogsSince(50, 10).empty());
}

TEST(TrainerLauncherTest, ExitReasons) {
  {
    auto p = StartOrDie(Shell("echo first >&2; echo 'out of memory' >&2; exit 3"));
    ASSERT_TRUE(p->WaitForExit(absl::Seconds(10)));
    EXPECT_EQ(p->State().exit_code, 3);
    EXPECT_EQ(p->State().reason, "out of memory");
  }
  {
    auto p = StartOrDie(Shell("exit 4"));
    ASSERT_TRUE(p->WaitForExit(absl::Seconds(10)));
    EXPECT_EQ(p->State().reason, "exited with code 4");
  }
  {
    auto p = StartOrDie(Shell("kill -SEGV $$"));
    ASSERT_TRUE(p->WaitForExit(absl::Seconds(10)));
    EXPECT_EQ(p->State().exit_code, 128 + SIGSEGV);
    EXPECT_NE(p->State().reason.find("killed by signal 11"), std::string::npos)
        << p->State().reason;
  }
}

TEST(TrainerLauncherTest, RunsInTheWorkDirWithExtraEnvironment) {
  common::TempDir tmp("yoke_trainer_launcher");  // removed with its files at the end
  std::string dir = tmp.path();
  TrainerLauncherOptions o = Shell("pwd; echo \"$YOKE_TEST_VAR\"");
  o.work_dir = dir;
  o.env = {"YOKE_TEST_VAR=hello"};
  auto p = StartOrDie(o);
  ASSERT_TRUE(p->WaitForExit(absl::Seconds(10)));
  auto logs = p->LogsSince(0, 10);
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_EQ(logs[0].text, dir);
  EXPECT_EQ(logs[1].text, "hello");
}

TEST(TrainerLauncherTest, StartFailuresAreReported) {
  TrainerLauncherOptions o;
  o.binary = "/nonexistent/yoke-trainer";
  auto p = TrainerLauncher::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("cannot run /nonexistent/yoke-trainer"), std::string::npos)
      << p.status();

  o = Shell("true");
  o.work_dir = "/nonexistent/dir";
  p = TrainerLauncher::Start(o);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("cannot enter working directory /nonexistent/dir"),
            std::string::npos)
      << p.status();
}

TEST(TrainerLauncherTest, DestructorKillsARunningChild) {
  pid_t pid;
  {
    auto p = StartOrDie(Shell("sleep 60"));
    ASSERT_NE(p, nullptr);
    pid = p->pid();
    EXPECT_EQ(kill(pid, 0), 0);
  }
  EXPECT_EQ(kill(pid, 0), -1);
}

}  // namespace
}  // namespace yoke::worker
