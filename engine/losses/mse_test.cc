#include "engine/losses/mse.h"

#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

TEST(MseTest, ValuesGradientAndAccuracyMatchHandComputed) {
  // Two examples, K = 2.
  float z[] = {0.5f, 2.0f,    // label 1: diffs (0.5, 1) -> (0.25 + 1) / 2 = 0.625; correct
               3.0f, -1.0f};  // label 1: diffs (3, -2)  -> (9 + 4) / 2 = 6.5; wrong
  int32_t y[] = {1, 1};
  Tensor zt = Tensor::Wrap(z, {2, 2}), yt = Tensor::Wrap(y, {2}, DType::kI32);
  Tensor dz = Tensor::Empty({2, 2});
  MeanSquaredError mse;
  auto r = mse.Compute(zt, yt, 0.5f, &dz);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->loss_sum, 0.625 + 6.5);
  EXPECT_EQ(r->correct, 1);
  // dz = scale * 2/K * diff = 0.5 * diff
  EXPECT_FLOAT_EQ(dz.data<float>()[0], 0.25f);
  EXPECT_FLOAT_EQ(dz.data<float>()[1], 0.5f);
  EXPECT_FLOAT_EQ(dz.data<float>()[2], 1.5f);
  EXPECT_FLOAT_EQ(dz.data<float>()[3], -1.0f);
}

TEST(MseTest, RejectsLabelOutOfRange) {
  float z[] = {0, 0, 0};
  int32_t y[] = {3};
  Tensor zt = Tensor::Wrap(z, {1, 3}), yt = Tensor::Wrap(y, {1}, DType::kI32);
  auto r = MeanSquaredError().Compute(zt, yt, 1.0f, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoke::engine
