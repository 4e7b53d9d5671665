#include "client/cluster_state.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace yoke::client {
namespace {

TEST(ClusterStateTest, RoundTripsThroughTheFileAndCreatesTheDirectory) {
  common::TempDir tmp("yoke_state_test");  // removed with its files at the end
  std::string path = tmp.path() + "/nested/dir/cluster.json";
  ClusterState st;
  st.address = "127.0.0.1:41234";
  st.dir = "/tmp/somewhere";
  st.coordinator_pid = 4321;
  st.worker_pids = {11, 22, 33};
  st.up_pid = 99;
  ASSERT_TRUE(WriteClusterState(st, path).ok());
  auto back = ReadClusterState(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->address, "127.0.0.1:41234");
  EXPECT_EQ(back->dir, "/tmp/somewhere");
  EXPECT_EQ(back->coordinator_pid, 4321);
  EXPECT_EQ(back->worker_pids, (std::vector<int>{11, 22, 33}));
  EXPECT_EQ(back->up_pid, 99);
}

TEST(ClusterStateTest, TheDirectoryItCreatesIsPrivate) {
  ClusterState state;
  state.address = "127.0.0.1:1";
  common::TempDir tmp("yoke_state_test");  // removed with its files at the end
  std::string dir = tmp.path() + "/state";
  ASSERT_TRUE(WriteClusterState(state, dir + "/cluster.json").ok());
  struct stat st;
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);
  // An existing directory keeps its mode.
  common::TempDir open_tmp("yoke_state_test");
  std::string open_dir = open_tmp.path();
  ASSERT_EQ(::chmod(open_dir.c_str(), 0755), 0);
  ASSERT_TRUE(WriteClusterState(state, open_dir + "/cluster.json").ok());
  ASSERT_EQ(::stat(open_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755);
}

TEST(ClusterStateTest, MissingFileIsNotFoundAndGarbageNamesTheProblem) {
  common::TempDir tmp("yoke_state_test");  // removed with its files at the end
  std::string dir = tmp.path();
  EXPECT_EQ(ReadClusterState(dir + "/none.json").status().code(), absl::StatusCode::kNotFound);

  std::ofstream(dir + "/garbage.json") << "this is not json";
  auto s = ReadClusterState(dir + "/garbage.json").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("garbage.json"), absl::string_view::npos) << s;

  std::ofstream(dir + "/noaddr.json") << R"({"coordinator_pid": 5})";
  s = ReadClusterState(dir + "/noaddr.json").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("address"), absl::string_view::npos) << s;

  std::ofstream(dir + "/badpid.json") << R"({"address": "a:1", "coordinator_pid": -3})";
  s = ReadClusterState(dir + "/badpid.json").status();
  EXPECT_NE(s.message().find("coordinator_pid"), absl::string_view::npos) << s;
}

TEST(ClusterStateTest, StateDirEnvironmentVariableWins) {
  common::TempDir tmp("yoke_state_test");  // removed with its files at the end
  std::string dir = tmp.path();
  setenv("YOKE_STATE_DIR", dir.c_str(), 1);
  EXPECT_EQ(DefaultClusterStatePath(), dir + "/cluster.json");
  unsetenv("YOKE_STATE_DIR");
  setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
  EXPECT_EQ(DefaultClusterStatePath(), "/run/user/1234/yoke/cluster.json");
  unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(DefaultClusterStatePath(),
            "/tmp/yoke-up-" + std::to_string(getuid()) + "/cluster.json");
}

}  // namespace
}  // namespace yoke::client
