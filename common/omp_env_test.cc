#include "common/omp_env.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace yoke::common {
namespace {

class OmpEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
  }
  void TearDown() override { SetUp(); }
};

TEST_F(OmpEnvTest, ShortensTheSpinWhenTheUserChoseNothing) {
  std::optional<std::string> env = TrainerOmpSpinEnv();
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(*env, "GOMP_SPINCOUNT=" + std::to_string(kTrainerGompSpinCount));
  // Shorter than libgomp's own default of 300,000.
  EXPECT_LT(kTrainerGompSpinCount, 300000);
}

TEST_F(OmpEnvTest, KeepsTheUsersWaitPolicy) {
  setenv("OMP_WAIT_POLICY", "active", 1);
  EXPECT_FALSE(TrainerOmpSpinEnv().has_value());
}

TEST_F(OmpEnvTest, KeepsTheUsersSpinCount) {
  setenv("GOMP_SPINCOUNT", "infinite", 1);
  EXPECT_FALSE(TrainerOmpSpinEnv().has_value());
}

}  // namespace
}  // namespace yoke::common
