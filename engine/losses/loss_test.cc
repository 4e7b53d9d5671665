#include "engine/losses/loss.h"

#include <cmath>
#include <string>
#include <vector>

#include "engine/rng.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

// Central differences of loss_sum against the analytic dlogits / grad_scale,
// for every logit of a random (N, K) batch.
void CheckLossGradient(const std::string& name, float lo, float hi, float smoothing = 0.0f) {
  SCOPED_TRACE(name + " label_smoothing " + std::to_string(smoothing));
  auto loss_or = CreateLoss(name, smoothing);
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
  CheckLossGradient("softmax_cross_entropy", -3.0f, 3.0f, 0.1f);
  CheckLossGradient("softmax_cross_entropy", -3.0f, 3.0f, 0.6f);
}

// The smoothed loss against -sum_j t_j log p_j with t = (1 - eps) onehot +
// eps / K, computed here directly from the definition (softmax, then logs).
TEST(LossTest, LabelSmoothingMatchesTheDefinition) {
  const int64_t n = 3, k = 4;
  const float eps = 0.2f;
  float z[] = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, 3.0f, -2.0f, 1.0f, -0.5f, 0.25f, 0.0f, 4.0f};
  int32_t y[] = {2, 0, 1};
  Tensor zt = Tensor::Wrap(z, {n, k}), yt = Tensor::Wrap(y, {n}, DType::kI32);
  double want = 0, plain = 0;
  for (int64_t i = 0; i < n; ++i) {
    double denom = 0;
    for (int64_t j = 0; j < k; ++j) denom += std::exp(double{z[i * k + j]});
    for (int64_t j = 0; j < k; ++j) {
      const double logp = std::log(std::exp(double{z[i * k + j]}) / denom);
      const double t = (j == y[i] ? 1.0 - eps : 0.0) + eps / k;
      want -= t * logp;
      if (j == y[i]) plain -= logp;
    }
  }
  auto loss = CreateLoss("softmax_cross_entropy", eps);
  ASSERT_TRUE(loss.ok()) << loss.status();
  auto r = (*loss)->Compute(zt, yt, 1.0f, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->loss_sum, want, 1e-5);
  // Smoothing changes the value (the check above would pass without it
  // otherwise), and leaves the accuracy count alone.
  EXPECT_GT(std::fabs(want - plain), 0.1);
  EXPECT_EQ(r->correct,
            (*CreateLoss("softmax_cross_entropy"))->Compute(zt, yt, 1.0f, nullptr)->correct);
}

TEST(LossTest, LabelSmoothingIsCheckedAndOnlyForCrossEntropy) {
  for (float bad : {-0.1f, 1.0f, 1.5f}) {
    auto l = CreateLoss("softmax_cross_entropy", bad);
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_NE(std::string(l.status().message()).find("training.label_smoothing"), std::string::npos)
        << l.status();
  }
  auto mse = CreateLoss("mse", 0.1f);
  ASSERT_FALSE(mse.ok());
  EXPECT_NE(std::string(mse.status().message()).find("only for loss softmax_cross_entropy"),
            std::string::npos)
      << mse.status();
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
