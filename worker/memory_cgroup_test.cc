// The worker's memory limit and the trainers' memory cgroups: the arithmetic,
// finding the controller in /proc's text, and real children in real cgroups
// through TrainerLauncher. Where this machine has a usable memory controller
// (root, and a cgroup v1 memory hierarchy or a cgroup2 one with memory), the
// cgroup tests fail rather than skip when the limit is not applied.
#include "worker/memory_cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/trainer_launcher.h"

namespace yoke::worker {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

TEST(MemoryLimitTest, TheDefaultKeepsATenthBetweenHalfAGigabyteAndFour) {
  EXPECT_EQ(DefaultMemoryLimit(16 * kGiB), 16 * kGiB - (16 * kGiB) / 10);
  EXPECT_EQ(DefaultMemoryLimit(128 * kGiB), 124 * kGiB);  // at most 4 GiB kept
  EXPECT_EQ(DefaultMemoryLimit(2 * kGiB), 2 * kGiB - 512 * kMiB);
  EXPECT_EQ(DefaultMemoryLimit(512 * kMiB), 256 * kMiB);  // never more than half kept
  EXPECT_EQ(DefaultMemoryLimit(0), 0);
}

TEST(MemoryLimitTest, AReplicasShareIsTheLimitOverTheReplicas) {
  EXPECT_EQ(ReplicaShare(12 * kGiB, 3), 4 * kGiB);
  EXPECT_EQ(ReplicaShare(10, 3), 3);
  EXPECT_EQ(ReplicaShare(8 * kGiB, 0), 8 * kGiB);
}

TEST(MemoryLimitTest, VisibleMemoryIsAtMostThePhysicalMemory) {
  const int64_t physical =
      static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  const int64_t visible = VisibleMemoryBytes();
  EXPECT_GT(visible, 0);
  EXPECT_LE(visible, physical);
}

TEST(MemoryLimitTest, KilledForMemoryTrustsTheCounterWhereThereIsOne) {
  CgroupMemoryStats s;
  s.oom_kills = 1;
  EXPECT_TRUE(KilledForMemory(s, /*sigkill=*/true));
  s.oom_kills = 0;
  s.limit_hits = 40;  // it hit the limit, reclaimed, and was killed by someone else
  EXPECT_FALSE(KilledForMemory(s, true));
  s.oom_kills = -1;  // a kernel before 4.13: no counter
  EXPECT_TRUE(KilledForMemory(s, true));
  EXPECT_FALSE(KilledForMemory(s, false));
  s.limit_hits = 0;
  EXPECT_FALSE(KilledForMemory(s, true));
  s.limit_bytes = 64 << 20;
  s.peak_bytes = 64 << 20;  // it reached the limit
  EXPECT_TRUE(KilledForMemory(s, true));
  s.peak_bytes = 20 << 20;
  EXPECT_FALSE(KilledForMemory(s, true));
}

// A fake /sys/fs/cgroup in a temporary folder, with mountinfo text for it.
class LocateTest : public ::testing::Test {
 protected:
  std::string Mountinfo(bool v1_memory, const std::string& v1_root = "/") {
    std::string text = absl::StrCat("22 1 0:20 / /proc rw - proc proc rw\n", "41 31 0:38 / ",
                                    tmp_.File("unified"), " rw,relatime - cgroup2 cgroup2 rw\n");
    if (v1_memory) {
      absl::StrAppend(&text, "35 31 0:32 ", v1_root, " ", tmp_.File("mem\\040ory"),
                      " rw,relatime shared:9 - cgroup cgroup rw,memory\n");
    }
    absl::StrAppend(&text, "32 31 0:29 / ", tmp_.File("cpu"), " rw - cgroup cgroup rw,cpu\n");
    return text;
  }
  common::TempDir tmp_{"yoke_locate_cgroup_test"};
};

TEST_F(LocateTest, CgroupTwoWhenItOffersMemoryElseVersionOne) {
  const std::string self = "5:cpu:/\n4:memory:/jobs/w1\n0::/jobs/w1\n";
  Write(tmp_.File("unified/jobs/w1/cgroup.controllers"), "cpu io pids\n");
  std::filesystem::create_directories(tmp_.File("mem ory/jobs/w1"));
  auto where = LocateMemoryCgroup(Mountinfo(true), self);
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(where->version, CgroupVersion::kV1);
  EXPECT_EQ(where->mount, tmp_.File("mem ory"));
  EXPECT_EQ(where->dir, tmp_.File("mem ory/jobs/w1"));

  Write(tmp_.File("unified/jobs/w1/cgroup.controllers"), "cpu io memory pids\n");
  where = LocateMemoryCgroup(Mountinfo(true), self);
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(where->version, CgroupVersion::kV2);
  EXPECT_EQ(where->dir, tmp_.File("unified/jobs/w1"));
}

TEST_F(LocateTest, AMountOfASubtreeIsFollowed) {
  // A container sees its own cgroup mounted as the hierarchy's root.
  std::filesystem::create_directories(tmp_.File("mem ory/inner"));
  auto where = LocateMemoryCgroup(Mountinfo(true, "/docker/abc"), "4:memory:/docker/abc/inner\n");
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(where->dir, tmp_.File("mem ory/inner"));
  where = LocateMemoryCgroup(Mountinfo(true, "/docker/abc"), "4:memory:/docker/abc\n");
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(where->dir, tmp_.File("mem ory"));
}

TEST_F(LocateTest, NoMemoryControllerSaysWhatIsMissing) {
  Write(tmp_.File("unified/cgroup.controllers"), "cpu io\n");
  auto where = LocateMemoryCgroup(Mountinfo(false), "5:cpu:/\n0::/\n");
  EXPECT_EQ(where.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(where.status().message(),
            absl::StrCat("the cgroup2 hierarchy at ", tmp_.File("unified"),
                         " does not offer the memory controller to ", tmp_.File("unified"),
                         ", and no cgroup v1 memory controller is mounted"));
  // A v1 memory cgroup that this mount does not show.
  where = LocateMemoryCgroup(Mountinfo(true), "4:memory:/elsewhere\n0::/\n");
  EXPECT_EQ(where.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(where.status().message()), HasSubstr("is not visible"));
}

// ---------------------------------------------------------------- real cgroups

// Whether this machine has a memory controller the worker must be able to
// use: root, and a v1 memory hierarchy or a cgroup2 one that lists memory.
// Decided from the usual mount points, independently of LocateMemoryCgroup.
bool MemoryControllerExpected() {
  if (::geteuid() != 0) return false;
  if (Exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) return true;
  for (const char* f :
       {"/sys/fs/cgroup/cgroup.controllers", "/sys/fs/cgroup/unified/cgroup.controllers"}) {
    if (Read(f).find("memory") != std::string::npos) return true;
  }
  return false;
}

// The worker's cgroups, or null (the test then skips) where the machine has
// none to offer. Fails the test when one is expected but cannot be used.
std::unique_ptr<MemoryCgroups> OpenOrSkip() {
  auto m = MemoryCgroups::Open();
  if (m.ok()) return *std::move(m);
  EXPECT_FALSE(MemoryControllerExpected())
      << "this machine has a memory controller, but the worker cannot use it: " << m.status();
  return nullptr;
}

bool WaitFor(const std::function<bool()>& cond, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return cond();
}

std::string Logs(const TrainerLauncher& p) {
  std::vector<std::string> lines;
  for (const auto& l : p.LogsSince(0, 1000)) lines.push_back(l.text);
  return absl::StrJoin(lines, "\n");
}

TrainerLauncherOptions Shell(const std::string& script, MemoryCgroups* cgroups, int64_t limit) {
  TrainerLauncherOptions o;
  o.binary = "/bin/sh";
  o.args = {"-c", script};
  o.memory_cgroups = cgroups;
  o.memory_limit_bytes = limit;
  return o;
}

TEST(MemoryCgroupTest, TheChildRunsInItsOwnLimitedCgroupWhichGoesWithIt) {
  auto cgroups = OpenOrSkip();
  if (!cgroups) GTEST_SKIP() << "no usable memory controller here";
  // The child says which cgroup it is in, from the kernel's point of view.
  auto p = TrainerLauncher::Start(
      Shell("cat /proc/self/cgroup; echo ready; exec sleep 30", cgroups.get(), 96 * kMiB));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(
      WaitFor([&] { return Logs(**p).find("ready") != std::string::npos; }, absl::Seconds(10)))
      << Logs(**p);
  const std::string dir = (*p)->State().memory_cgroup;
  ASSERT_THAT(dir, HasSubstr(cgroups->dir() + "/yoke-trainer-"));
  const std::string rel = dir.substr(cgroups->dir().size());
  const bool v2 = cgroups->version() == CgroupVersion::kV2;
  // Its /proc/self/cgroup line for the memory hierarchy ends with that cgroup.
  bool listed = false;
  for (const auto& l : (*p)->LogsSince(0, 100)) {
    const bool memory_line =
        v2 ? l.text.rfind("0::", 0) == 0 : l.text.find(":memory:") != std::string::npos;
    if (memory_line)
      listed = l.text.size() >= rel.size() &&
               l.text.compare(l.text.size() - rel.size(), rel.size(), rel) == 0;
  }
  EXPECT_TRUE(listed) << "the child is not in " << dir << ":\n" << Logs(**p);
  // The kernel holds it to 96 MiB.
  EXPECT_EQ(Read(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes")), "100663296\n");
  EXPECT_THAT(Read(dir + "/cgroup.procs"), HasSubstr(absl::StrCat((*p)->pid(), "\n")));
  (*p)->Stop(absl::ZeroDuration());
  ASSERT_TRUE((*p)->WaitForExit(absl::Seconds(10)));
  const TrainerState s = (*p)->State();
  EXPECT_FALSE(s.out_of_memory);
  EXPECT_EQ(s.memory.limit_bytes, 96 * kMiB);
  EXPECT_TRUE(s.cgroup_removed);
  EXPECT_FALSE(Exists(dir)) << dir;
}

TEST(MemoryCgroupTest, AHogIsKilledAloneAndReportedAsOutOfMemory) {
  auto cgroups = OpenOrSkip();
  if (!cgroups) GTEST_SKIP() << "no usable memory controller here";
  // A neighbour in a cgroup of its own, which must live on.
  auto quiet = TrainerLauncher::Start(Shell("exec sleep 30", cgroups.get(), 64 * kMiB));
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  // The shell keeps 512 MB of output in a variable: far past 64 MiB.
  const absl::Time start = absl::Now();
  auto hog = TrainerLauncher::Start(
      Shell("x=$(head -c 536870912 /dev/zero | tr '\\0' a); echo survived ${#x}", cgroups.get(),
            64 * kMiB));
  ASSERT_TRUE(hog.ok()) << hog.status();
  if (!(*hog)->WaitForExit(absl::Seconds(30))) {
    (*hog)->Stop(absl::ZeroDuration());
    FAIL() << "not stopped by its 64 MiB share in 30 s: the limit was not applied";
  }
  const absl::Duration took = absl::Now() - start;
  const TrainerState s = (*hog)->State();
  EXPECT_EQ(s.exit_code, 128 + SIGKILL) << s.reason << "\n" << Logs(**hog);
  EXPECT_TRUE(s.out_of_memory);
  EXPECT_EQ(s.reason,
            "out of memory: the trainer passed its memory share of 67108864 bytes (64.0 MiB) "
            "and the kernel's OOM killer ended it (signal 9)");
  EXPECT_GE(s.memory.oom_kills, 1);
  EXPECT_LE(s.memory.peak_bytes, 64 * kMiB);
  EXPECT_GT(s.memory.peak_bytes, 32 * kMiB);
  EXPECT_TRUE(s.cgroup_removed);
  EXPECT_FALSE(Exists(s.memory_cgroup));
  EXPECT_LT(took, absl::Seconds(10));
  // Its neighbour was not touched.
  EXPECT_FALSE((*quiet)->State().exited);
  EXPECT_EQ(::kill((*quiet)->pid(), 0), 0);
}

TEST(MemoryCgroupTest, WhatEscapedTheProcessGroupIsKilledWithTheCgroup) {
  auto cgroups = OpenOrSkip();
  if (!cgroups) GTEST_SKIP() << "no usable memory controller here";
  // A grandchild in a session of its own (the shell waits until it is):
  // killing the trainer's process group misses it, the cgroup does not.
  auto p = TrainerLauncher::Start(
      Shell("setsid sleep 300 </dev/null >/dev/null 2>&1 & g=$!; "
            "while [ \"$(cut -d' ' -f6 /proc/$g/stat)\" != $g ]; do sleep 0.01; done; echo $g",
            cgroups.get(), 64 * kMiB));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WaitForExit(absl::Seconds(10)));
  const TrainerState s = (*p)->State();
  EXPECT_EQ(s.exit_code, 0) << s.reason;
  EXPECT_TRUE(s.cgroup_removed);
  EXPECT_FALSE(Exists(s.memory_cgroup));
  const std::string pid = (*p)->LogsSince(0, 10).at(0).text;
  // Gone, or a zombie waiting for init.
  const std::string status = Read("/proc/" + pid + "/status");
  EXPECT_TRUE(status.empty() || status.find("State:\tZ") != std::string::npos) << status;
}

// A worker that was SIGKILLed leaves its trainers' cgroups behind; the next
// one to open the hierarchy removes the empty ones of workers that are gone,
// and nothing else.
TEST(MemoryCgroupTest, OpeningRemovesTheEmptyCgroupsOfWorkersThatAreGone) {
  auto first = OpenOrSkip();
  if (!first) GTEST_SKIP() << "no usable memory controller here";
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  const pid_t sleeper = fork();
  if (sleeper == 0) {
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(sleeper, 0);
  const std::string base = first->dir() + "/yoke-trainer-";
  const std::string stale = absl::StrCat(base, dead, "-7");
  const std::string busy = absl::StrCat(base, dead, "-8");     // a trainer outlived it
  const std::string alive = absl::StrCat(base, 1, "-7");       // pid 1 runs
  const std::string other = first->dir() + "/yoke-trainer-x";  // not a worker's
  for (const std::string& d : {stale, busy, alive, other})
    ASSERT_EQ(::mkdir(d.c_str(), 0755), 0) << d;
  std::ofstream(busy + "/cgroup.procs") << sleeper << "\n";
  ASSERT_THAT(Read(busy + "/cgroup.procs"), HasSubstr(absl::StrCat(sleeper)));

  auto second = MemoryCgroups::Open();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->stale_removed(), 1);
  EXPECT_FALSE(Exists(stale));
  EXPECT_TRUE(Exists(busy));
  EXPECT_TRUE(Exists(alive));
  EXPECT_TRUE(Exists(other));

  kill(sleeper, SIGKILL);
  waitpid(sleeper, nullptr, 0);
  EXPECT_TRUE(WaitFor([&] { return ::rmdir(busy.c_str()) == 0; }, absl::Seconds(5))) << busy;
  for (const std::string& d : {stale, alive, other}) ::rmdir(d.c_str());
}

TEST(MemoryCgroupTest, ACgroupThatCannotBeMadeFailsTheStart) {
  // A location where no cgroup file system is: the start fails, naming it.
  common::TempDir tmp("yoke_cgroup_fake");
  auto m = MemoryCgroups::OpenAt({CgroupVersion::kV1, tmp.path(), tmp.path()});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("cannot write '67108864' to " + tmp.path() + "/yoke-trainer-"));
}

}  // namespace
}  // namespace yoke::worker
