#include "engine/losses/softmax_cross_entropy.h"

#include <cmath>

#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

TEST(SoftmaxCrossEntropyTest, ValuesMatchHandComputed) {
  // Row 0: softmax of (0, ln 2, ln 3) = (1, 2, 3) / 6, label 2 -> -ln(1/2).
  // Row 1: uniform logits, label 0 -> ln 3; arg-max ties resolve to index 0.
  float z[] = {0.0f, std::log(2.0f), std::log(3.0f), 1.0f, 1.0f, 1.0f};
  int32_t y[] = {2, 0};
  Tensor zt = Tensor::Wrap(z, {2, 3}), yt = Tensor::Wrap(y, {2}, DType::kI32);
  Tensor dz = Tensor::Empty({2, 3});
  auto r = SoftmaxCrossEntropy().Compute(zt, yt, 1.0f, &dz);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->loss_sum, std::log(2.0) + std::log(3.0), 1e-6);
  EXPECT_EQ(r->correct, 2);
  EXPECT_NEAR(dz.data<float>()[0], 1.0 / 6, 1e-6);
  EXPECT_NEAR(dz.data<float>()[2], 0.5 - 1.0, 1e-6);
  EXPECT_NEAR(dz.data<float>()[3], 1.0 / 3 - 1.0, 1e-6);
}

TEST(SoftmaxCrossEntropyTest, StableWithHugeLogits) {
  // exp(1e4) overflows; the loss of the wrong class is exactly the logit gap.
  float z[] = {1e4f, 0.0f, -1e4f};
  int32_t y[] = {1};
  Tensor zt = Tensor::Wrap(z, {1, 3}), yt = Tensor::Wrap(y, {1}, DType::kI32);
  Tensor dz = Tensor::Empty({1, 3});
  auto r = SoftmaxCrossEntropy().Compute(zt, yt, 1.0f, &dz);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::isfinite(r->loss_sum));
  EXPECT_NEAR(r->loss_sum, 1e4, 1e-2);
  EXPECT_EQ(r->correct, 0);
  EXPECT_FLOAT_EQ(dz.data<float>()[0], 1.0f);
  EXPECT_FLOAT_EQ(dz.data<float>()[1], -1.0f);
  EXPECT_EQ(dz.data<float>()[2], 0.0f);
}

TEST(SoftmaxCrossEntropyTest, RejectsLabelOutOfRange) {
  float z[] = {0, 0};
  for (int32_t bad : {2, -1}) {
    int32_t y[] = {bad};
    Tensor zt = Tensor::Wrap(z, {1, 2}), yt = Tensor::Wrap(y, {1}, DType::kI32);
    auto r = SoftmaxCrossEntropy().Compute(zt, yt, 1.0f, nullptr);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("label"), std::string::npos);
  }
}

}  // namespace
}  // namespace yoke::engine
