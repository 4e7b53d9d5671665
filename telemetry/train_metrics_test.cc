#include "telemetry/train_metrics.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

TEST(TrainMetricsTest, StepsLandInTheFirstBucketThatHoldsThem) {
  google::protobuf::RepeatedField<int64_t> counts;
  CountStepSeconds(0.0005, &counts);  // <= 1 ms
  CountStepSeconds(0.001, &counts);   // the bound itself belongs to its bucket
  CountStepSeconds(0.0011, &counts);  // (1 ms, 2.5 ms]
  CountStepSeconds(1e6, &counts);     // +Inf
  ASSERT_EQ(counts.size(), static_cast<int>(kStepSecondsBuckets.size()) + 1);
  EXPECT_EQ(counts.Get(0), 2);
  EXPECT_EQ(counts.Get(1), 1);
  EXPECT_EQ(counts.Get(counts.size() - 1), 1);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  EXPECT_EQ(total, 4);
}

TEST(TrainMetricsTest, BreakdownIsPerStepAndComputeIsTheRest) {
  v1::StepProgress p;
  EXPECT_EQ(BreakdownOf(p).step, 0);
  EXPECT_EQ(FormatBreakdown(BreakdownOf(p)), "");
  p.set_window_steps(4);
  p.set_step_seconds(0.4);
  p.set_data_wait_seconds(0.04);
  p.set_allreduce_exposed_seconds(0.08);
  p.set_allreduce_seconds(0.16);
  const StepBreakdown b = BreakdownOf(p);
  EXPECT_DOUBLE_EQ(b.step, 0.1);
  EXPECT_DOUBLE_EQ(b.data_wait, 0.01);
  EXPECT_DOUBLE_EQ(b.allreduce_exposed, 0.02);
  EXPECT_DOUBLE_EQ(b.allreduce_total, 0.04);
  EXPECT_NEAR(b.compute, 0.07, 1e-12);
  // Clock skew between the parts never makes compute negative.
  p.set_data_wait_seconds(0.5);
  EXPECT_EQ(BreakdownOf(p).compute, 0);
}

}  // namespace
}  // namespace yoke::common
