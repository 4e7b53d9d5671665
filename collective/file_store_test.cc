#include "collective/file_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "collective/testing/gloo_ranks.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

using common::TempDir;

TEST(FileStoreTest, SetThenGetOverwriteAndBinaryValues) {
  TempDir dir;
  auto s = FileStore::Open(dir.path() + "/nested/rdzv");
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string binary("\0a\xff/b", 5);
  ASSERT_TRUE((*s)->Set("data-parallel/gloo/0", binary).ok());
  EXPECT_EQ(*(*s)->Get("data-parallel/gloo/0", absl::ZeroDuration()), binary);
  ASSERT_TRUE((*s)->Set("data-parallel/gloo/0", "second").ok());
  EXPECT_EQ(*(*s)->Get("data-parallel/gloo/0", absl::Seconds(1)), "second");
  // An empty value is a value, not a missing key.
  ASSERT_TRUE((*s)->Set("empty", "").ok());
  EXPECT_EQ(*(*s)->Get("empty", absl::ZeroDuration()), "");
  // Keys stay flat files in the directory, and no temporary file is left.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator((*s)->dir())) {
    EXPECT_TRUE(e.is_regular_file()) << e.path();
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
    ++files;
  }
  EXPECT_EQ(files, 2);
  // Keys that differ only in escaped bytes do not collide.
  ASSERT_TRUE((*s)->Set("a/b", "slash").ok());
  ASSERT_TRUE((*s)->Set("a%2Fb", "percent").ok());
  EXPECT_EQ(*(*s)->Get("a/b", absl::ZeroDuration()), "slash");
  EXPECT_EQ(*(*s)->Get("a%2Fb", absl::ZeroDuration()), "percent");
  EXPECT_NE((*s)->PathOf(".."), dir.path() + "/nested");
}

TEST(FileStoreTest, GetWaitsForAnotherProcess) {
  TempDir dir;
  auto s = FileStore::Open(dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child opens the directory on its own and writes after a pause.
    absl::SleepFor(absl::Milliseconds(200));
    auto cs = FileStore::Open(dir.path());
    _exit(cs.ok() && (*cs)->Set("from/child", std::string(100000, 'x')).ok() ? 0 : 1);
  }
  auto v = (*s)->Get("from/child", absl::Seconds(20));
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string(100000, 'x'));  // never a partial value
}

TEST(FileStoreTest, MissingKeyTimesOutNamingKeyAndDirectory) {
  TempDir dir;
  auto s = FileStore::Open(dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  const absl::Time start = absl::Now();
  auto v = (*s)->Get("gloo/1", absl::Milliseconds(150));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(140));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("gloo/1"), std::string::npos) << v.status();
  EXPECT_NE(v.status().message().find(dir.path()), std::string::npos) << v.status();
}

TEST(FileStoreTest, BadDirectoriesAreClearErrors) {
  EXPECT_EQ(FileStore::Open("").status().code(), absl::StatusCode::kInvalidArgument);
  TempDir dir;
  const std::string file = dir.path() + "/a-file";
  std::ofstream(file) << "not a directory";
  auto s = FileStore::Open(file + "/sub");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(file), std::string::npos) << s.status();
}

// Two Gloo ranks (threads) bootstrap through the file store and allreduce.
TEST(FileStoreTest, GlooBootstrapsThroughIt) {
  TempDir dir;
  auto s = FileStore::Open(dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  auto comms = testing::ConnectGloo(2, s->get());
  ASSERT_EQ(comms.size(), 2u);
  ASSERT_TRUE(comms[0] && comms[1]);
  float values[2][3] = {{1, 2, 3}, {10, 20, 30}};
  testing::OnEveryRank(comms, [&](int r, Communicator& c) {
    auto w = c.Allreduce(Buffer{values[r], 3, DataType::kF32, DeviceKind::kCpu, 0}, {});
    ASSERT_TRUE(w->Wait().ok());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(values[r][0], 11);
    EXPECT_EQ(values[r][2], 33);
  }
}

}  // namespace
}  // namespace yoke::collective
