#include "engine/losses/loss.h"

#include <cmath>
#include <vector>

#include "engine/rng.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

// Central differences of loss_sum against the analytic dlogits / grad_scale,
// for every logit of a random (N, K) batch.
void CheckLossGradient(const std::string& name, float lo, float hi) {
  SCOPED_TRACE(name);
  auto loss_or = CreateLoss(name);
  ASSERT_TRUE(loss_or.ok()) << loss_or.status();
  Loss& loss = **loss_or;
  const int64_t n = 4, k = 5;
  Tensor z = Tensor::Empty({n, k});
  Tensor y = Tensor::Empty({n}, DType::kI32);
  common::Philox rng(3, 0);
  for (int64_t i = 0; i < n * k; ++i) z.data<float>()[i] = lo + (hi - lo) * rng.NextFloat();
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(rng.Uniform(k));
  const float scale = 0.25f;
  Tensor dz = Tensor::Empty({n, k});
  ASSERT_TRUE(loss.Compute(z, y, scale, &dz).ok());
  const float h = 1e-2f;
  for (int64_t i = 0; i < n * k; ++i) {
    float* v = z.data<float>() + i;
    const float saved = *v;
    *v = saved + h;
    const double lp = loss.Compute(z, y, scale, nullptr)->loss_sum;
    *v = saved - h;
    const double lm = loss.Compute(z, y, scale, nullptr)->loss_sum;
    *v = saved;
    const double numeric = (lp - lm) / (2.0 * h);
    EXPECT_NEAR(dz.data<float>()[i] / scale, numeric, 2e-3 * std::max(1.0, std::fabs(numeric)))
        << "logit " << i;
  }
}

TEST(LossTest, GradientsMatchFiniteDifferences) {
  CheckLossGradient("softmax_cross_entropy", -3.0f, 3.0f);
  CheckLossGradient("mse", -1.5f, 1.5f);
}

TEST(LossTest, CreateKnowsBothAndListsThemOnError) {
  EXPECT_EQ(KnownLosses(), (std::vector<std::string>{"mse", "softmax_cross_entropy"}));
  for (const std::string& name : KnownLosses()) {
    auto l = CreateLoss(name);
    ASSERT_TRUE(l.ok());
    EXPECT_EQ((*l)->name(), name);
  }
  // Unset TrainingSpec.loss means the documented default.
  EXPECT_STREQ((*CreateLoss(""))->name(), "softmax_cross_entropy");
  auto bad = CreateLoss("hinge");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(bad.status().message());
  EXPECT_NE(msg.find("training.loss"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hinge"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mse, softmax_cross_entropy"), std::string::npos) << msg;
}

}  // namespace
}  // namespace yoke::engine
