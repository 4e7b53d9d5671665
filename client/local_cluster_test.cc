// The process plumbing of `yoke up`/`yoke down` with stand-in daemons (copies
// of /bin/sleep named like the real ones, shells that ignore SIGTERM). The
// real daemons are exercised by tests/cluster_e2e_test.cc.
#include "client/local_cluster.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "client/cluster_state.h"
#include "common/testing/file_contents.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace yoke::client {
namespace {

bool Alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  return !(paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z');
}

void CopyFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
  out.close();
  chmod(to.c_str(), 0755);
}

using common::FileContents;

TEST(LocalClusterTest, SpawnedDaemonWritesItsLogInItsOwnSession) {
  common::TempDir tmp("yoke_up_test");  // removed with its files at the end
  std::string dir = tmp.path();
  auto pid = SpawnDaemon({"/bin/sh", "-c", "echo out; echo err >&2; sleep 30"}, dir + "/d.log");
  ASSERT_TRUE(pid.ok()) << pid.status();
  // The child's setsid and exec race with this thread; once the shell has
  // written to the log, both have happened.
  for (int i = 0; i < 250 && LogTail(dir + "/d.log").find("err") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(getsid(*pid), *pid);  // a session leader: terminal signals miss it
  EXPECT_TRUE(ProcessIsNamed(*pid, "sh"));
  EXPECT_FALSE(ProcessIsNamed(*pid, "yoke-worker"));
  EXPECT_EQ(LogTail(dir + "/d.log"), "  | out\n  | err\n");
  EXPECT_TRUE(StopProcess(*pid, std::chrono::seconds(5)));
  EXPECT_FALSE(Alive(*pid));

  auto bad = SpawnDaemon({"/bin/true"}, "/nonexistent-dir/x.log");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/nonexistent-dir/x.log"), absl::string_view::npos);
}

TEST(LocalClusterTest, StopEscalatesToSigkillAfterTheGrace) {
  common::TempDir tmp("yoke_up_test");  // removed with its files at the end
  std::string dir = tmp.path();
  auto pid = SpawnDaemon(
      {"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"}, dir + "/d.log");
  ASSERT_TRUE(pid.ok());
  for (int i = 0; i < 100 && LogTail(dir + "/d.log").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(StopProcess(*pid, std::chrono::milliseconds(400)));
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(400));  // SIGTERM was ignored
  EXPECT_LT(took, std::chrono::seconds(4));
  EXPECT_FALSE(Alive(*pid));
}

TEST(LocalClusterTest, LogTailKeepsTheLastLines) {
  common::TempDir tmp("yoke_up_test");  // removed with its files at the end
  std::string dir = tmp.path();
  std::ofstream(dir + "/l.log") << "a\nb\nc\nd\n";
  EXPECT_EQ(LogTail(dir + "/l.log", 2), "  | c\n  | d\n");
  EXPECT_EQ(LogTail(dir + "/none.log"), "");
}

TEST(LocalClusterTest, DownStopsTheRecordedDaemonsAndNothingElse) {
  common::TempDir tmp("yoke_up_test");  // removed with its files at the end
  std::string dir = tmp.path();
  setenv("YOKE_STATE_DIR", (dir + "/state").c_str(), 1);
  CopyFile("/bin/sleep", dir + "/yoke-worker");
  CopyFile("/bin/sleep", dir + "/yoke-coordinator");
  auto w1 = SpawnDaemon({dir + "/yoke-worker", "60"}, dir + "/w1.log");
  auto w2 = SpawnDaemon({dir + "/yoke-worker", "60"}, dir + "/w2.log");
  auto c = SpawnDaemon({dir + "/yoke-coordinator", "60"}, dir + "/c.log");
  // A pid in the state file that now belongs to someone else (pid reuse).
  auto other = SpawnDaemon({"/bin/sleep", "60"}, dir + "/o.log");
  ASSERT_TRUE(w1.ok() && w2.ok() && c.ok() && other.ok());
  ClusterState st;
  st.address = "127.0.0.1:1";
  st.dir = dir;
  st.coordinator_pid = *c;
  st.worker_pids = {*w1, *w2, *other};
  ASSERT_TRUE(WriteClusterState(st, dir + "/cluster.json").ok());
  ASSERT_TRUE(WriteClusterState(st, DefaultClusterStatePath()).ok());

  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  EXPECT_EQ(RunDown({"--dir", dir, "--grace", "2"}, out, err), 0) << FileContents(err);
  EXPECT_NE(FileContents(out).find("stopped the cluster at 127.0.0.1:1"), std::string::npos);
  // The daemons were our children here: reap what init would reap.
  for (pid_t p : {*w1, *w2, *c}) {
    waitpid(p, nullptr, WNOHANG);
    EXPECT_FALSE(Alive(p)) << p;
  }
  EXPECT_TRUE(Alive(*other));
  EXPECT_FALSE(ReadClusterState(dir + "/cluster.json").ok());
  EXPECT_FALSE(ReadClusterState(DefaultClusterStatePath()).ok());
  StopProcess(*other, std::chrono::seconds(1));

  // Nothing recorded any more: nothing to stop, and that is not an error.
  std::rewind(out);
  EXPECT_EQ(RunDown({}, out, err), 0);
  EXPECT_NE(FileContents(out).find("nothing to stop"), std::string::npos);
  std::fclose(out);
  std::fclose(err);
  unsetenv("YOKE_STATE_DIR");
}

TEST(LocalClusterTest, UpRejectsBadFlags) {
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  EXPECT_EQ(RunUp({"--workers", "0"}, out, err), 2);
  EXPECT_NE(FileContents(err).find("--workers: expected an integer >= 1, got '0'"),
            std::string::npos);
  EXPECT_EQ(RunUp({"--bogus"}, out, err), 2);
  EXPECT_EQ(RunUp({"--memory-limit", "1MiB"}, out, err), 2);
  EXPECT_NE(FileContents(err).find("--memory-limit: expected a size of at least 64MiB"),
            std::string::npos)
      << FileContents(err);
  EXPECT_EQ(RunDown({"--grace", "x"}, out, err), 2);
  std::fclose(out);
  std::fclose(err);
}

}  // namespace
}  // namespace yoke::client
