#include "common/self_dir.h"

#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace yoke::common {
namespace {

TEST(SelfDirTest, HoldsThisTestBinary) {
  const std::string dir = SelfDir();
  ASSERT_FALSE(dir.empty());
  EXPECT_EQ(dir[0], '/');
  EXPECT_NE(dir.back(), '/');
  // CMake names this binary common_self_dir_test, Bazel self_dir_test.
  const bool here = ::access((dir + "/common_self_dir_test").c_str(), X_OK) == 0 ||
                    ::access((dir + "/self_dir_test").c_str(), X_OK) == 0;
  EXPECT_TRUE(here) << dir;
}

}  // namespace
}  // namespace yoke::common
