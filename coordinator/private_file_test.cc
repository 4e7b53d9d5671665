#include "coordinator/private_file.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "coordinator/auth_store.h"
#include "coordinator/sqlite_job_store.h"
#include "gtest/gtest.h"

namespace yoke::server {
namespace {

class PrivateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/yoke_private_file_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // The most permissive umask: only MakePrivate may keep others out.
    old_umask_ = ::umask(0);
  }
  void TearDown() override {
    ::umask(old_umask_);
    std::filesystem::remove_all(dir_);
  }
  static int Mode(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return -1;
    return st.st_mode & 0777;
  }

  std::string dir_;
  mode_t old_umask_ = 0;
};

TEST_F(PrivateFileTest, JobStoreAndItsWalAreCreatedForTheOwnerOnly) {
  const std::string path = dir_ + "/coordinator.db";
  auto store = SqliteJobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Job job;
  job.mutable_spec()->set_name("private");
  ASSERT_TRUE((*store)->Create(job).ok());  // writes the WAL
  EXPECT_EQ(Mode(path), 0600);
  EXPECT_EQ(Mode(path + "-wal"), 0600);
  // Every file SQLite made beside it (-shm unless it locks exclusively).
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(Mode(e.path().string()), 0600) << e.path();
    ++files;
  }
  EXPECT_GE(files, 2);
}

TEST_F(PrivateFileTest, AuthStoreIsCreatedForTheOwnerOnly) {
  const std::string path = dir_ + "/coordinator.db.auth";
  auto store = AuthStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(Mode(path), 0600);
}

TEST_F(PrivateFileTest, AnOlderWorldReadableStoreIsMadePrivateWithItsCompanions) {
  const std::string path = dir_ + "/old.db";
  for (const std::string& p : {path, path + "-wal", path + "-shm"}) {
    std::ofstream(p) << "";
    ASSERT_EQ(::chmod(p.c_str(), 0644), 0);
  }
  ASSERT_TRUE(MakePrivate(path).ok());
  EXPECT_EQ(Mode(path), 0600);
  EXPECT_EQ(Mode(path + "-wal"), 0600);
  EXPECT_EQ(Mode(path + "-shm"), 0600);
  EXPECT_EQ(Mode(path + "-journal"), -1);  // not created
}

TEST_F(PrivateFileTest, InMemoryStoresAreLeftAloneAndAnImpossiblePathIsNamed) {
  EXPECT_TRUE(MakePrivate(":memory:").ok());
  EXPECT_TRUE(MakePrivate("").ok());
  const std::string path = dir_ + "/no/such/dir/coordinator.db";
  const absl::Status s = MakePrivate(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  auto store = SqliteJobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("job store '" + path), std::string::npos)
      << store.status();
}

}  // namespace
}  // namespace yoke::server
