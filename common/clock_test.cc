#include "common/clock.h"

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

TEST(FakeClockTest, MovesOnlyWhenAdvanced) {
  FakeClock clock;
  const int64_t t0 = clock.NowMs();
  EXPECT_EQ(t0, int64_t{1704067200} * 1000);
  EXPECT_EQ(clock.NowMs(), t0);
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(clock.NowMs(), t0 + 1500);
  clock.Set(absl::FromUnixMillis(42));
  EXPECT_EQ(clock.NowMs(), 42);
}

TEST(RealClockTest, FollowsTheSystemClock) {
  const int64_t before = absl::ToUnixMillis(absl::Now());
  const int64_t now = RealClock::Get()->NowMs();
  const int64_t after = absl::ToUnixMillis(absl::Now());
  EXPECT_LE(before, now);
  EXPECT_LE(now, after);
}

}  // namespace
}  // namespace yoke::common
