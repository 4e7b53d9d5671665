#include "engine/memory_plan.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

// Lifetimes overlap when neither buffer is last read before the other is
// written; a buffer written at the step that last reads another overlaps it.
bool Overlap(const BufferLife& a, const BufferLife& b) {
  return a.first <= b.last && b.first <= a.last;
}

// Checks what every plan must hold, whatever the heuristic: each buffer in
// one slot at least its size, no two live buffers in one slot.
void ExpectValid(const std::vector<BufferLife>& lives, const BufferPlan& plan) {
  ASSERT_EQ(plan.slot.size(), lives.size());
  for (size_t i = 0; i < lives.size(); ++i) {
    ASSERT_GE(plan.slot[i], 0);
    ASSERT_LT(plan.slot[i], static_cast<int>(plan.slot_elements.size()));
    EXPECT_GE(plan.slot_elements[plan.slot[i]], lives[i].elements) << "buffer " << i;
    for (size_t j = i + 1; j < lives.size(); ++j) {
      if (plan.slot[i] == plan.slot[j]) {
        EXPECT_FALSE(Overlap(lives[i], lives[j])) << "buffers " << i << " and " << j;
      }
    }
  }
}

TEST(MemoryPlanTest, AChainNeedsTwoSlots) {
  // Step i writes buffer i and reads buffer i - 1: a plain stack of layers.
  std::vector<BufferLife> lives;
  for (int i = 0; i < 20; ++i) lives.push_back({100 + i % 3, i, i + 1});
  const BufferPlan plan = PlanBuffers(lives);
  ExpectValid(lives, plan);
  EXPECT_EQ(plan.slot_elements.size(), 2u);
  EXPECT_EQ(plan.total_elements(), 204);
}

TEST(MemoryPlanTest, AnOutputNeverSharesWithAnInputOfItsStep) {
  // b is written at the step that last reads a: they cannot share; c comes
  // one step later and takes a's slot.
  const std::vector<BufferLife> lives = {{10, 0, 3}, {10, 3, 5}, {10, 4, 5}};
  const BufferPlan plan = PlanBuffers(lives);
  ExpectValid(lives, plan);
  EXPECT_NE(plan.slot[0], plan.slot[1]);
  EXPECT_EQ(plan.slot[0], plan.slot[2]);
  EXPECT_EQ(plan.total_elements(), 20);
}

TEST(MemoryPlanTest, AResidualKeepsItsInputAcrossTheBlock) {
  // x (step 0) is read by the add at step 3; the branch's two buffers
  // alternate beside it; the add's output reuses the first branch slot.
  const std::vector<BufferLife> lives = {{64, 0, 3}, {64, 1, 2}, {64, 2, 3}, {64, 3, 4}};
  const BufferPlan plan = PlanBuffers(lives);
  ExpectValid(lives, plan);
  EXPECT_EQ(plan.total_elements(), 3 * 64);
}

TEST(MemoryPlanTest, BestFitPrefersTheSmallestFreeSlotThatHoldsTheBuffer) {
  // From step 2 slots of 100 and 10 elements are free. The 10-element buffer
  // written at step 2 takes the small one, which leaves the large one for
  // the 100-element buffer written at step 3: 110 elements, where taking the
  // first free slot would need 200.
  const std::vector<BufferLife> lives = {{100, 0, 1}, {10, 0, 1}, {10, 2, 4}, {100, 3, 4}};
  const BufferPlan plan = PlanBuffers(lives);
  ExpectValid(lives, plan);
  EXPECT_EQ(plan.slot[2], plan.slot[1]);
  EXPECT_EQ(plan.slot[3], plan.slot[0]);
  EXPECT_EQ(plan.total_elements(), 110);
}

TEST(MemoryPlanTest, RandomLifetimesGetValidPlansNoLargerThanNoSharing) {
  std::mt19937 rng(7);
  int shared = 0;
  for (int c = 0; c < 500; ++c) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<BufferLife> lives;
    int64_t sum = 0;
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % 30);
      const int last = first + static_cast<int>(rng() % 8);
      lives.push_back({1 + static_cast<int64_t>(rng() % 1000), first, last});
      sum += lives.back().elements;
    }
    const BufferPlan plan = PlanBuffers(lives);
    ExpectValid(lives, plan);
    // The peak of live buffers at any step is a floor no plan can beat.
    int64_t peak = 0;
    for (int t = 0; t < 40; ++t) {
      int64_t live = 0;
      for (const BufferLife& l : lives) live += l.first <= t && t <= l.last ? l.elements : 0;
      peak = std::max(peak, live);
    }
    EXPECT_GE(plan.total_elements(), peak);
    EXPECT_TRUE(CheckBufferPlan(lives, plan).ok());
    EXPECT_LE(plan.total_elements(), sum);
    if (plan.total_elements() < sum) ++shared;
    if (HasFailure()) return;
  }
  EXPECT_GT(shared, 250) << "the plan shares memory in too few cases";
}

TEST(MemoryPlanTest, TheCheckerFindsTwoLiveBuffersInOneSlotAndASlotTooSmall) {
  const std::vector<BufferLife> lives = {{10, 0, 2}, {10, 2, 3}, {10, 3, 4}};
  BufferPlan plan = PlanBuffers(lives);
  EXPECT_TRUE(CheckBufferPlan(lives, plan).ok());
  plan.slot[1] = plan.slot[0];
  absl::Status s = CheckBufferPlan(lives, plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("buffers 0 (steps 0-2) and 1 (steps 2-3)"), std::string::npos) << s;
  plan = PlanBuffers(lives);
  plan.slot_elements[plan.slot[1]] = 9;
  s = CheckBufferPlan(lives, plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("(10 elements) in slot 1 of 9"), std::string::npos) << s;
}

TEST(MemoryPlanTest, NoBuffersNoSlots) {
  const BufferPlan plan = PlanBuffers({});
  EXPECT_TRUE(plan.slot.empty());
  EXPECT_EQ(plan.total_elements(), 0);
}

}  // namespace
}  // namespace yoke::engine
