#include "ps/staleness.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace yoke::ps {
namespace {

TEST(StalenessTest, SyncWaitsForEveryWorkersPreviousStep) {
  StalenessGate g(Consistency::kSync, 5);  // the staleness is ignored
  ASSERT_TRUE(g.Join(0).ok());
  ASSERT_TRUE(g.Join(1).ok());
  EXPECT_TRUE(g.MayStart(0));
  ASSERT_TRUE(g.Finished(0, 0).ok());
  EXPECT_FALSE(g.MayStart(0));  // worker 1 is still in step 0
  EXPECT_TRUE(g.MayStart(1));
  ASSERT_TRUE(g.Finished(1, 0).ok());
  EXPECT_TRUE(g.MayStart(0));
  EXPECT_TRUE(g.MayStart(1));
}

// One worker held in step 0: the others run s steps beyond it, then wait, and
// each step it finishes lets them run one more.
TEST(StalenessTest, BoundedLetsTheOthersRunExactlySStepsAheadOfAStraggler) {
  for (int64_t s : {0, 1, 3}) {
    StalenessGate g(Consistency::kBounded, s);
    for (int w = 0; w < 3; ++w) ASSERT_TRUE(g.Join(w).ok());
    for (int round = 0; round < 3; ++round) {
      for (int w = 1; w < 3; ++w) {
        while (g.MayStart(w)) ASSERT_TRUE(g.Finished(w, g.Clock(w)).ok());
        // It ran every step up to the straggler's current one plus s.
        EXPECT_EQ(g.Clock(w) - 1, g.Clock(0) + s) << "s=" << s;
      }
      ASSERT_TRUE(g.Finished(0, g.Clock(0)).ok());
      EXPECT_TRUE(g.MayStart(1));
    }
  }
}

TEST(StalenessTest, AsyncNeverWaits) {
  StalenessGate g(Consistency::kAsync, 0);
  ASSERT_TRUE(g.Join(0).ok());
  ASSERT_TRUE(g.Join(1).ok());
  for (int64_t t = 0; t < 1000; ++t) {
    ASSERT_TRUE(g.MayStart(0));
    ASSERT_TRUE(g.Finished(0, t).ok());
  }
  EXPECT_EQ(g.Clock(0), 1000);
  EXPECT_EQ(g.SlowestClock(), 0);
}

// s = 0 decides as sync does, for any order of finished steps.
TEST(StalenessTest, BoundedZeroIsSync) {
  std::mt19937 rng(11);
  StalenessGate sync(Consistency::kSync, 0), bounded(Consistency::kBounded, 0);
  for (int w = 0; w < 4; ++w) {
    ASSERT_TRUE(sync.Join(w).ok());
    ASSERT_TRUE(bounded.Join(w).ok());
  }
  for (int i = 0; i < 5000; ++i) {
    const int w = static_cast<int>(rng() % 4);
    ASSERT_EQ(sync.MayStart(w), bounded.MayStart(w));
    if (sync.MayStart(w)) {
      ASSERT_TRUE(sync.Finished(w, sync.Clock(w)).ok());
      ASSERT_TRUE(bounded.Finished(w, bounded.Clock(w)).ok());
    }
  }
  EXPECT_GT(sync.SlowestClock(), 100);  // the walk went somewhere
}

TEST(StalenessTest, ADeadWorkerStopsHoldingTheOthersAndRejoinsAtTheSlowest) {
  StalenessGate g(Consistency::kBounded, 1);
  for (int w = 0; w < 3; ++w) ASSERT_TRUE(g.Join(w).ok());
  for (int t = 0; t < 2; ++t) ASSERT_TRUE(g.Finished(1, t).ok());
  ASSERT_TRUE(g.Finished(2, 0).ok());
  EXPECT_FALSE(g.MayStart(1));  // two steps past worker 0
  g.Leave(0);                   // worker 0 dies: worker 2 is now the slowest
  EXPECT_TRUE(g.MayStart(1));
  EXPECT_EQ(g.SlowestClock(), 1);
  ASSERT_TRUE(g.Join(0).ok());  // restarted: at the slowest live clock
  EXPECT_EQ(g.Clock(0), 1);
  EXPECT_TRUE(g.MayStart(0));
  EXPECT_FALSE(g.Join(0).ok());
  EXPECT_EQ(g.Finished(0, 5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Finished(9, 0).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(g.MayStart(9));
}

TEST(StalenessTest, JoinAtPlacesARestartedWorkerWhereItsPsTasksAgreed) {
  StalenessGate g(Consistency::kBounded, 2);
  ASSERT_TRUE(g.Join(0).ok());
  for (int t = 0; t < 4; ++t) ASSERT_TRUE(g.Finished(0, t).ok());
  ASSERT_TRUE(g.JoinAt(1, 3).ok());  // behind worker 0 by one step
  EXPECT_EQ(g.Clock(1), 3);
  EXPECT_EQ(g.SlowestClock(), 3);
  EXPECT_TRUE(g.MayStart(0));  // 4 is 1 past the slowest
  ASSERT_TRUE(g.Finished(0, 4).ok());
  ASSERT_TRUE(g.Finished(0, 5).ok());
  EXPECT_FALSE(g.MayStart(0));  // 6 is 3 past worker 1's 3
  ASSERT_TRUE(g.Finished(1, 3).ok());
  EXPECT_TRUE(g.MayStart(0));
  EXPECT_EQ(g.JoinAt(1, 9).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(g.JoinAt(2, -1).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoke::ps
