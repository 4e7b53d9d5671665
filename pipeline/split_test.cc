#include "pipeline/split.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::pipeline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The optimum by exhaustive dynamic programming: best[k][i] is the least
// largest stage when the first i layers make k stages.
int64_t OptimalLargestStage(const std::vector<int64_t>& c, int p) {
  const int n = static_cast<int>(c.size());
  const int64_t inf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(p + 1, std::vector<int64_t>(n + 1, inf));
  best[0][0] = 0;
  for (int k = 1; k <= p; ++k) {
    for (int i = k; i <= n; ++i) {
      int64_t last = 0;
      for (int j = i - 1; j >= k - 1; --j) {  // the k-th stage is layers [j, i)
        last += c[j];
        if (best[k - 1][j] != inf)
          best[k][i] = std::min(best[k][i], std::max(best[k - 1][j], last));
      }
    }
  }
  return best[p][n];
}

TEST(SplitTest, BalancedSplitIsOptimalAndGivesEveryStageALayer) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 12);
    const int p = 1 + static_cast<int>(rng() % n);
    std::vector<int64_t> c(n);
    for (auto& x : c) x = (trial % 5 == 0) ? 0 : static_cast<int64_t>(rng() % 100);
    auto starts = BalancedSplit(c, p);
    ASSERT_TRUE(starts.ok()) << starts.status();
    ASSERT_EQ(static_cast<int>(starts->size()), p);
    EXPECT_EQ((*starts)[0], 0);
    for (int s = 1; s < p; ++s) ASSERT_LT((*starts)[s - 1], (*starts)[s]);
    ASSERT_LT(starts->back(), n);
    EXPECT_EQ(LargestStageCost(c, *starts), OptimalLargestStage(c, p)) << "trial " << trial;
  }
}

TEST(SplitTest, AnUnevenModelSplitsUnevenly) {
  // One heavy layer: it gets a stage to itself.
  auto starts = BalancedSplit({1, 1, 1, 10, 1, 1}, 3);
  ASSERT_TRUE(starts.ok());
  EXPECT_THAT(*starts, ElementsAre(0, 3, 4));
  starts = BalancedSplit({5, 5, 5, 5}, 4);
  ASSERT_TRUE(starts.ok());
  EXPECT_THAT(*starts, ElementsAre(0, 1, 2, 3));
}

TEST(SplitTest, SplitErrorsSayWhy) {
  EXPECT_THAT(std::string(BalancedSplit({1, 2}, 3).status().message()),
              HasSubstr("cannot split 2 layers into 3 stages"));
  EXPECT_THAT(std::string(BalancedSplit({1, -2}, 1).status().message()),
              HasSubstr("layer 1: negative cost -2"));
  EXPECT_FALSE(BalancedSplit({1}, 0).ok());
  EXPECT_TRUE(CheckBoundaries({2, 5}, 6).ok());
  EXPECT_TRUE(CheckBoundaries({}, 1).ok());
  EXPECT_THAT(std::string(CheckBoundaries({2, 2}, 6).message()),
              HasSubstr("pipeline.boundaries[1]: 2 must be after 2"));
  EXPECT_FALSE(CheckBoundaries({0}, 6).ok());
  EXPECT_FALSE(CheckBoundaries({6}, 6).ok());
}

TEST(SplitTest, MicroBatchesDifferByAtMostOneAndAreNeverEmpty) {
  auto m = MicroBatchSizes(10, 4);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(*m, ElementsAre(3, 3, 2, 2));
  m = MicroBatchSizes(3, 8);  // an epoch's short last step
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(*m, ElementsAre(1, 1, 1));
  for (int b = 1; b < 70; ++b) {
    for (int k = 1; k < 12; ++k) {
      auto s = MicroBatchSizes(b, k);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(std::accumulate(s->begin(), s->end(), 0), b);
      EXPECT_EQ(static_cast<int>(s->size()), std::min(b, k));
      EXPECT_LE(s->front() - s->back(), 1);
      EXPECT_GE(s->back(), 1);
    }
  }
  EXPECT_FALSE(MicroBatchSizes(0, 4).ok());
  EXPECT_FALSE(MicroBatchSizes(4, 0).ok());
}

}  // namespace
}  // namespace yoke::pipeline
