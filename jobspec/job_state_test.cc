#include "jobspec/job_state.h"

#include "gtest/gtest.h"

namespace yoke::common {
namespace {

TEST(JobStateTest, OnlySucceededFailedAndCancelledAreTerminal) {
  for (int i = v1::JobState_MIN; i <= v1::JobState_MAX; ++i) {
    const auto s = static_cast<v1::JobState>(i);
    const bool want = s == v1::JOB_SUCCEEDED || s == v1::JOB_FAILED || s == v1::JOB_CANCELLED;
    EXPECT_EQ(IsTerminal(s), want) << v1::JobState_Name(s);
  }
  EXPECT_FALSE(IsTerminal(v1::JOB_RUNNING));
  EXPECT_TRUE(IsTerminal(v1::JOB_CANCELLED));
}

}  // namespace
}  // namespace yoke::common
