#include "engine/layers/batch_norm.h"

#include <cmath>

#include "engine/registry.h"
#include "engine/rng.h"
#include "engine/testing/grad_check.h"
#include "gtest/gtest.h"

namespace yoke {
namespace {

void Fill(const Tensor& t, uint64_t seed, float lo, float hi) {
  Philox rng(seed, 9);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (hi - lo) * rng.NextFloat();
}

struct Stats {
  std::vector<double> mean, var;  // biased var
};
Stats NaiveStats(const Tensor& x, int64_t c) {
  const int64_t m = x.numel() / c;
  Stats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c; ++j) s.mean[j] += x.data<float>()[i * c + j];
  for (int64_t j = 0; j < c; ++j) s.mean[j] /= m;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c; ++j) {
      double d = x.data<float>()[i * c + j] - s.mean[j];
      s.var[j] += d * d;
    }
  for (int64_t j = 0; j < c; ++j) s.var[j] /= m;
  return s;
}

TEST(BatchNormTest, TrainingForwardAndRunningStats) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{6}}) {
    const int64_t c = shape.back(), n = 4;
    BatchNormLayer layer(0.1f, 1e-5f);
    layer.set_name("bn");
    ParamSet p;
    ASSERT_EQ(*layer.Build({shape}, &p), shape);
    p.Finalize();
    p.Initialize(1);
    float* gamma = p.value(0).data<float>();
    float* beta = p.value(1).data<float>();
    for (int64_t j = 0; j < c; ++j) {
      EXPECT_EQ(gamma[j], 1.0f);  // init
      EXPECT_EQ(beta[j], 0.0f);
      EXPECT_EQ(p.state(0).data<float>()[j], 0.0f);
      EXPECT_EQ(p.state(1).data<float>()[j], 1.0f);
      gamma[j] = 0.5f + 0.25f * j;
      beta[j] = -0.1f * j;
    }
    Shape full = shape;
    full.insert(full.begin(), n);
    Tensor x = Tensor::Empty(full), y = Tensor::Empty(full);
    std::vector<double> want_mean(c, 0.0), want_var(c, 1.0);
    for (int step = 0; step < 2; ++step) {
      Fill(x, 10 + step, -2.0f + step, 3.0f);
      ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
      Stats s = NaiveStats(x, c);
      const int64_t m = x.numel() / c;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < c; ++j) {
          double want = gamma[j] * (x.data<float>()[i * c + j] - s.mean[j]) /
                            std::sqrt(s.var[j] + 1e-5) + beta[j];
          ASSERT_NEAR(y.data<float>()[i * c + j], want, 1e-4);
        }
      for (int64_t j = 0; j < c; ++j) {
        want_mean[j] = 0.9 * want_mean[j] + 0.1 * s.mean[j];
        want_var[j] = 0.9 * want_var[j] + 0.1 * s.var[j] * m / (m - 1.0);
        EXPECT_NEAR(p.state(0).data<float>()[j], want_mean[j], 1e-5);
        EXPECT_NEAR(p.state(1).data<float>()[j], want_var[j], 1e-5);
      }
    }
  }
}

TEST(BatchNormTest, EvalUsesRunningStatsAndLeavesThem) {
  BatchNormLayer layer(0.1f, 1e-3f);
  layer.set_name("bn");
  ParamSet p;
  ASSERT_TRUE(layer.Build({{2, 2, 3}}, &p).ok());
  p.Finalize();
  p.Initialize(1);
  float rm[] = {0.5f, -1.0f, 2.0f}, rv[] = {4.0f, 0.25f, 1.0f};
  float g[] = {2.0f, 1.0f, -1.0f}, b[] = {0.0f, 1.0f, 0.5f};
  std::copy(rm, rm + 3, p.state(0).data<float>());
  std::copy(rv, rv + 3, p.state(1).data<float>());
  std::copy(g, g + 3, p.value(0).data<float>());
  std::copy(b, b + 3, p.value(1).data<float>());
  Tensor x = Tensor::Empty({2, 2, 2, 3}), y = Tensor::Empty({2, 2, 2, 3});
  Fill(x, 3, -1, 1);
  LayerContext eval;
  eval.training = false;
  ASSERT_TRUE(layer.Forward({&x}, &y, eval).ok());
  for (int64_t i = 0; i < x.numel(); ++i) {
    int j = i % 3;
    float want = g[j] * (x.data<float>()[i] - rm[j]) / std::sqrt(rv[j] + 1e-3f) + b[j];
    ASSERT_NEAR(y.data<float>()[i], want, 1e-5);
  }
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(p.state(0).data<float>()[j], rm[j]);
    EXPECT_EQ(p.state(1).data<float>()[j], rv[j]);
  }
}

TEST(BatchNormTest, GradientsMatchFiniteDifferencesInTraining) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{5, 3, 2}, Shape{7}}) {
    BatchNormLayer layer(0.1f, 1e-5f);
    layer.set_name("bn");
    testing::CheckLayerGradients(&layer, {shape}, 3);
  }
}

TEST(BatchNormTest, GradientsMatchFiniteDifferencesInEval) {
  BatchNormLayer layer(0.1f, 1e-5f);
  layer.set_name("bn");
  testing::GradCheckOptions o;
  o.training = false;
  testing::CheckLayerGradients(&layer, {{3, 3, 4}}, 2, o);
}

TEST(BatchNormTest, BackwardWithoutInputGradient) {
  BatchNormLayer layer(0.1f, 1e-5f);
  layer.set_name("bn");
  ParamSet p;
  ASSERT_TRUE(layer.Build({{4}}, &p).ok());
  p.Finalize();
  p.Initialize(1);
  Tensor x = Tensor::Empty({5, 4}), y = Tensor::Empty({5, 4}), dy = Tensor::Empty({5, 4});
  Fill(x, 1, -1, 1);
  Fill(dy, 2, -1, 1);
  ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
  absl::Status st = layer.Backward({&x}, y, dy, {nullptr}, {});
  ASSERT_TRUE(st.ok()) << st;
  // dbeta = sum dy; dgamma = sum dy * xhat, with xhat = (y - beta) / gamma.
  for (int j = 0; j < 4; ++j) {
    double db = 0, dg = 0;
    for (int i = 0; i < 5; ++i) {
      db += dy.data<float>()[i * 4 + j];
      dg += dy.data<float>()[i * 4 + j] * y.data<float>()[i * 4 + j];  // gamma 1, beta 0
    }
    EXPECT_NEAR(p.grad(1).data<float>()[j], db, 1e-5);
    EXPECT_NEAR(p.grad(0).data<float>()[j], dg, 1e-4);
  }
}

TEST(BatchNormTest, RejectsBadSpecs) {
  v1::LayerSpec s;
  s.mutable_batch_norm()->set_momentum(1.5f);
  auto l = LayerRegistry::Global().Create(s);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("batch_norm.momentum"), std::string::npos);
  s.mutable_batch_norm()->set_momentum(0);
  s.mutable_batch_norm()->set_epsilon(-1);
  l = LayerRegistry::Global().Create(s);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("batch_norm.epsilon"), std::string::npos);
  s.mutable_batch_norm()->set_epsilon(0);
  l = LayerRegistry::Global().Create(s);
  ASSERT_TRUE(l.ok());
  ParamSet p;
  (*l)->set_name("bn");
  EXPECT_FALSE((*l)->Build({{}}, &p).ok());
}

}  // namespace
}  // namespace yoke
