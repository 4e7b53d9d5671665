#include "pipeline/schedule.h"

#include <algorithm>
#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::pipeline {
namespace {

using ::testing::HasSubstr;
using Schedule = std::vector<std::vector<Action>>;

Schedule Build(ScheduleKind kind, int p, int m) {
  auto s = BuildSchedule(kind, p, m);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : Schedule();
}

Action A(Op op, int i) { return {op, i}; }

// PipeDream-flush on 2 stages, 3 micro-batches: stage 0 runs one forward
// ahead, then alternates; the last stage alternates from the start.
TEST(ScheduleTest, OneFOneBOnTwoStagesIsTheWarmUpThenAlternation) {
  const Schedule s = Build(ScheduleKind::k1F1B, 2, 3);
  ASSERT_EQ(s.size(), 2u);
  const std::vector<Action> stage0 = {
      A(Op::kForward, 0),        A(Op::kSendActivation, 0), A(Op::kForward, 1),
      A(Op::kSendActivation, 1), A(Op::kRecvGradient, 0),   A(Op::kBackward, 0),
      A(Op::kForward, 2),        A(Op::kSendActivation, 2), A(Op::kRecvGradient, 1),
      A(Op::kBackward, 1),       A(Op::kRecvGradient, 2),   A(Op::kBackward, 2)};
  const std::vector<Action> stage1 = {
      A(Op::kRecvActivation, 0), A(Op::kForward, 0), A(Op::kBackward, 0), A(Op::kSendGradient, 0),
      A(Op::kRecvActivation, 1), A(Op::kForward, 1), A(Op::kBackward, 1), A(Op::kSendGradient, 1),
      A(Op::kRecvActivation, 2), A(Op::kForward, 2), A(Op::kBackward, 2), A(Op::kSendGradient, 2)};
  EXPECT_EQ(s[0], stage0);
  EXPECT_EQ(s[1], stage1);
}

// Every stage's backwards run in micro-batch order under both schedules, so
// its gradient sums the micro-batches as one rank accumulating them would.
TEST(ScheduleTest, BackwardsRunInMicroBatchOrder) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (const Schedule& s : {Build(kind, 4, 6), Build(kind, 3, 2)}) {
      for (const auto& stage : s) {
        int next = 0;
        for (const Action& a : stage) {
          if (a.op == Op::kBackward) {
            EXPECT_EQ(a.micro_batch, next++);
          }
        }
      }
    }
  }
}

// Both schedules verify for many shapes, m < p included; their bubble is the
// ideal (p-1)/(m+p-1) and 1F1B holds at most p-s micro-batches on stage s,
// GPipe all m.
TEST(ScheduleTest, BothVerifyWithTheIdealBubbleAndTheirActivationBounds) {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 4, 7, 8, 16, 32}) {
        auto stats = VerifySchedule(Build(kind, p, m), m);
        ASSERT_TRUE(stats.ok()) << "p=" << p << " m=" << m << ": " << stats.status();
        EXPECT_NEAR(stats->bubble_fraction, IdealBubbleFraction(p, m), 1e-12)
            << "p=" << p << " m=" << m;
        for (int s = 0; s < p; ++s) {
          const int bound = kind == ScheduleKind::k1F1B ? std::min(p - s, m) : m;
          EXPECT_EQ(stats->peak_in_flight[s], bound) << "p=" << p << " m=" << m << " s=" << s;
        }
      }
    }
  }
  auto s = VerifySchedule(Build(ScheduleKind::k1F1B, 4, 16), 16);
  ASSERT_TRUE(s.ok());
  std::printf("[ measured ] 1F1B p=4 m=16: bubble %.4f (ideal %.4f), makespan %.0f units\n",
              s->bubble_fraction, IdealBubbleFraction(4, 16), s->makespan);
}

// The criss-cross that deadlocks: stage 0 waits for micro-batch 0's gradient
// before it sends micro-batch 1's activation, which stage 1 receives first.
TEST(ScheduleTest, APlantedDeadlockIsRejectedNamingWhoWaitsForWhat) {
  Schedule s = {
      {A(Op::kForward, 0), A(Op::kSendActivation, 0), A(Op::kRecvGradient, 0), A(Op::kBackward, 0),
       A(Op::kForward, 1), A(Op::kSendActivation, 1), A(Op::kRecvGradient, 1), A(Op::kBackward, 1)},
      {A(Op::kRecvActivation, 1), A(Op::kForward, 1), A(Op::kBackward, 1), A(Op::kSendGradient, 1),
       A(Op::kRecvActivation, 0), A(Op::kForward, 0), A(Op::kBackward, 0),
       A(Op::kSendGradient, 0)}};
  auto r = VerifySchedule(s, 2);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ(r.status().message(),
            "the schedule deadlocks: stage 0 waits at action 2 (receive gradient 0 from stage 1); "
            "stage 1 waits at action 0 (receive activation 1 from stage 0)");
  // Stage 1 taking micro-batch 0 first makes the same actions complete.
  std::swap_ranges(s[1].begin(), s[1].begin() + 4, s[1].begin() + 4);
  EXPECT_TRUE(VerifySchedule(s, 2).ok());
}

TEST(ScheduleTest, BrokenStagesAreRejectedNamingTheAction) {
  const Schedule good = Build(ScheduleKind::k1F1B, 3, 4);
  ASSERT_TRUE(VerifySchedule(good, 4).ok());
  auto expect = [](const Schedule& s, int m, const std::string& why) {
    auto r = VerifySchedule(s, m);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << why;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(why));
  };
  Schedule s = good;
  s[1].erase(s[1].begin());  // stage 1's first receive
  expect(s, 4, "stage 1, action 0 (forward 0): forward before its activation arrived");
  s = good;
  s[2].push_back(A(Op::kSendActivation, 0));
  expect(s, 4, "the last stage has no stage after it");
  s = good;
  s[0].insert(s[0].begin(), A(Op::kRecvActivation, 0));
  expect(s, 4, "the first stage has no stage before it");
  s = good;
  s[0].push_back(A(Op::kForward, 1));
  expect(s, 4, "(forward 1): a second time");
  s = good;
  s[0].push_back(A(Op::kForward, 4));
  expect(s, 4, "no such micro-batch (the step has 4)");
  s = good;
  s[2].pop_back();  // its last action: the send of micro-batch 3's gradient
  expect(s, 4, "stage 2 never runs the send of the gradient of micro-batch 3");
  s = good;
  auto b = std::find(s[0].begin(), s[0].end(), A(Op::kBackward, 0));
  std::rotate(s[0].begin(), b, b + 1);  // backward 0 first
  expect(s, 4, "stage 0, action 0 (backward 0): backward before its forward");
  // A schedule built for more micro-batches than the step has.
  expect(Build(ScheduleKind::kGPipe, 2, 3), 2, "no such micro-batch (the step has 2)");
}

TEST(ScheduleTest, BuildRefusesEmptyShapes) {
  EXPECT_EQ(BuildSchedule(ScheduleKind::k1F1B, 0, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(BuildSchedule(ScheduleKind::kGPipe, 2, 0).status().message()),
              HasSubstr("pipeline.micro_batches: must be 1 to 4096, got 0"));
  EXPECT_FALSE(BuildSchedule(ScheduleKind::kGPipe, 5000, 1).ok());
  EXPECT_FALSE(VerifySchedule({}, 1).ok());
}

}  // namespace
}  // namespace yoke::pipeline
