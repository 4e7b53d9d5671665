#include "ps/shard_map.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::ps {
namespace {

using ::testing::HasSubstr;

// The shards tile [0, total) in order, one per PS task from 0, balanced to a
// float, none below the minimum unless there is only one.
void ExpectWellFormed(const ShardMap& m, int64_t total, int num_ps, int64_t min_bytes) {
  ASSERT_FALSE(m.shards.empty());
  ASSERT_LE(static_cast<int>(m.shards.size()), num_ps);
  EXPECT_EQ(m.total, total);
  int64_t next = 0;
  for (size_t i = 0; i < m.shards.size(); ++i) {
    const Shard& s = m.shards[i];
    EXPECT_EQ(s.ps, static_cast<int>(i));
    EXPECT_EQ(s.offset, next);
    EXPECT_GE(s.count, 1);
    EXPECT_LE(m.shards.front().count - s.count, 1);
    if (m.shards.size() > 1) {
      EXPECT_GE(s.count * 4, min_bytes);
    }
    next += s.count;
  }
  EXPECT_EQ(next, total);
}

TEST(ShardMapTest, ByteBalancedRangesWithAMinimumShard) {
  auto m = BuildShardMap(1000000, 3);  // 4 MB over 3 PS tasks
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->shards.size(), 3u);
  EXPECT_EQ(m->shards[0].count, 333334);
  EXPECT_EQ(m->shards[1].count, 333333);
  EXPECT_EQ(m->shards[2].offset, 666667);
  EXPECT_EQ(m->Describe(3), "3 shards of 333333..333334 floats on PS 0-2");
  EXPECT_EQ(m->ShardOf(0).ps, 0);
  EXPECT_EQ(m->ShardOf(333333).ps, 0);
  EXPECT_EQ(m->ShardOf(333334).ps, 1);
  EXPECT_EQ(m->ShardOf(999999).ps, 2);

  // 800 KB: three shards of at least 256 KiB, so one of 4 PS tasks is idle.
  m = BuildShardMap(200000, 4);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->shards.size(), 3u);
  EXPECT_THAT(m->Describe(4), HasSubstr("(1 PS tasks idle)"));
  // A small model lives on one PS task.
  m = BuildShardMap(1000, 4);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->shards.size(), 1u);
  EXPECT_EQ(m->Describe(4), "1 shard of 1000 floats on PS 0 (3 PS tasks idle)");
}

TEST(ShardMapTest, EveryShapeIsWellFormed) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t total = 1 + static_cast<int64_t>(rng() % 3000000);
    const int num_ps = 1 + static_cast<int>(rng() % 9);
    const int64_t min_bytes = 4 + static_cast<int64_t>(rng() % (1 << 20));
    auto m = BuildShardMap(total, num_ps, min_bytes);
    ASSERT_TRUE(m.ok()) << m.status();
    ExpectWellFormed(*m, total, num_ps, min_bytes);
    // As many shards as the minimum allows, up to the PS tasks.
    const int64_t want = std::min<int64_t>(num_ps, std::max<int64_t>(1, total * 4 / min_bytes));
    EXPECT_EQ(static_cast<int64_t>(m->shards.size()), want);
  }
}

TEST(ShardMapTest, RefusesEmptyInputs) {
  EXPECT_EQ(BuildShardMap(0, 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(BuildShardMap(10, 0).ok());
  EXPECT_FALSE(BuildShardMap(10, 1, 2).ok());
}

}  // namespace
}  // namespace yoke::ps
