#include "common/port_range.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

using ::testing::HasSubstr;

TEST(PortRangeTest, ParsesRangesAndNamesBadOnes) {
  EXPECT_TRUE(ParsePortRange("")->empty());
  EXPECT_EQ(ParsePortRange("41000-41099")->first, 41000);
  EXPECT_EQ(ParsePortRange("41000-41099")->size(), 100);
  EXPECT_EQ(ParsePortRange("41000")->size(), 1);
  EXPECT_EQ(ParsePortRange("41000-41099")->ToString(), "41000-41099");
  for (const char* bad : {"0-10", "10-5", "1-70000", "a-b", "1-2-3", "-5", "41000-"}) {
    auto r = ParsePortRange(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr(bad));
  }
}

}  // namespace
}  // namespace yoke::common
