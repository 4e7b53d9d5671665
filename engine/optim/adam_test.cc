#include "engine/optim/adam.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

struct Fixture {
  ParamSet params;
  Fixture() {
    params.Declare("l/a", {3}, Init::Constant(0));
    params.Declare("l/b", {2}, Init::Constant(0));
    EXPECT_TRUE(params.Finalize().ok());
  }
  float& Value(int i) { return params.value(i < 3 ? 0 : 1).data<float>()[i < 3 ? i : i - 3]; }
  float& Grad(int i) { return params.grad(i < 3 ? 0 : 1).data<float>()[i < 3 ? i : i - 3]; }
};

std::unique_ptr<Optimizer> Make(ParamSet* p, const std::string& type, float wd, float beta1 = 0,
                                float beta2 = 0, float eps = 0) {
  v1::OptimizerSpec spec;
  spec.set_type(type);
  spec.set_lr(0.1f);
  spec.set_weight_decay(wd);
  spec.set_beta1(beta1);
  spec.set_beta2(beta2);
  spec.set_epsilon(eps);
  auto o = CreateOptimizer(spec, p);
  EXPECT_TRUE(o.ok()) << o.status();
  return std::move(o).value();
}

// p = 1, constant g = 0.5, lr = 0.1, default betas. Step 1: m = 0.05,
// v = 0.00025, m^ = 0.5, v^ = 0.25 -> p -= 0.1 * 0.5 / 0.5. Step 2: m = 0.095,
// m^ = 0.095 / 0.19 = 0.5; v = 0.00049975, v^ = 0.00049975 / 0.001999 = 0.25.
TEST(AdamTest, HandComputedTwoSteps) {
  Fixture f;
  f.Value(0) = 1.0f;
  f.Grad(0) = 0.5f;
  auto opt = Make(&f.params, "adam", 0.0f);
  ASSERT_TRUE(opt->Step(0.1f).ok());
  EXPECT_NEAR(f.Value(0), 0.9, 1e-6);
  ASSERT_TRUE(opt->Step(0.1f).ok());
  EXPECT_NEAR(f.Value(0), 0.8, 1e-6);
  // A zero gradient with zero state leaves the parameter alone.
  EXPECT_EQ(f.Value(1), 0.0f);
}

// With weight decay 0.1: Adam's first step is lr * sign(g + wd p) whatever wd
// is (bias-corrected m / sqrt(v) = +-1), so p = 0.9; AdamW first shrinks
// p by lr * wd * p = 0.01, then takes the same step: 0.89.
TEST(AdamTest, AdamAndAdamWDifferByDecoupledDecay) {
  Fixture a, w;
  a.Value(0) = w.Value(0) = 1.0f;
  a.Grad(0) = w.Grad(0) = 0.5f;
  auto adam = Make(&a.params, "adam", 0.1f);
  auto adamw = Make(&w.params, "adamw", 0.1f);
  EXPECT_STREQ(adam->type(), "adam");
  EXPECT_STREQ(adamw->type(), "adamw");
  ASSERT_TRUE(adam->Step(0.1f).ok());
  ASSERT_TRUE(adamw->Step(0.1f).ok());
  EXPECT_NEAR(a.Value(0), 0.9, 1e-6);
  EXPECT_NEAR(w.Value(0), 0.89, 1e-6);
}

// Three steps, all elements, changing gradients and rates, non-default
// hyper-parameters, against the rule written out in double.
TEST(AdamTest, ThreeStepsMatchDoubleReference) {
  const std::vector<double> p0 = {0.5, -1.0, 2.0, 0.25, -0.75};
  const std::vector<std::vector<double>> grads = {
      {0.1, -0.2, 0.3, -0.4, 0.5}, {-0.3, 0.1, 0.0, 0.2, -0.1}, {0.2, 0.2, -0.5, 0.05, 0.3}};
  const double lrs[] = {0.1, 0.05, 0.2};
  const double b1 = 0.8, b2 = 0.95, eps = 1e-3, wd = 0.05;
  for (const std::string type : {"adam", "adamw"}) {
    SCOPED_TRACE(type);
    Fixture f;
    for (int i = 0; i < 5; ++i) f.Value(i) = static_cast<float>(p0[i]);
    auto opt = Make(&f.params, type, wd, b1, b2, eps);
    std::vector<double> p = p0, m(5, 0.0), v(5, 0.0);
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < 5; ++i) f.Grad(i) = static_cast<float>(grads[s][i]);
      ASSERT_TRUE(opt->Step(static_cast<float>(lrs[s])).ok());
      const int t = s + 1;
      for (int i = 0; i < 5; ++i) {
        double g = grads[s][i];
        if (type == "adam")
          g += wd * p[i];
        else
          p[i] -= lrs[s] * wd * p[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double mhat = m[i] / (1 - std::pow(b1, t));
        const double vhat = v[i] / (1 - std::pow(b2, t));
        p[i] -= lrs[s] * mhat / (std::sqrt(vhat) + eps);
      }
    }
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(f.Value(i), p[i], 2e-6) << i;
    EXPECT_EQ(opt->step_count(), 3);
    const float* flat = f.params.flat_values().data<float>();
    for (int64_t i = 3; i < 16; ++i) EXPECT_EQ(flat[i], 0.0f) << "padding " << i;
  }
}

TEST(AdamTest, StateRestoreIncludingStepCountContinuesIdentically) {
  Fixture a, b;
  for (int i = 0; i < 5; ++i) {
    a.Value(i) = 0.1f * i;
    a.Grad(i) = 0.2f - 0.1f * i;
  }
  auto oa = Make(&a.params, "adam", 0.0f);
  ASSERT_TRUE(oa->Step(0.1f).ok());
  ASSERT_TRUE(oa->Step(0.1f).ok());
  b.params.flat_values().CopyFrom(a.params.flat_values());
  auto ob = Make(&b.params, "adam", 0.0f);
  auto sa = oa->State(), sb = ob->State();
  ASSERT_EQ(sa.size(), 2u);
  EXPECT_EQ(sa[0].first, "exp_avg");
  EXPECT_EQ(sa[1].first, "exp_avg_sq");
  for (size_t k = 0; k < sa.size(); ++k) sb[k].second.CopyFrom(sa[k].second);
  ob->set_step_count(oa->step_count());
  for (int i = 0; i < 5; ++i) b.Grad(i) = a.Grad(i);
  ASSERT_TRUE(oa->Step(0.1f).ok());
  ASSERT_TRUE(ob->Step(0.1f).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.Value(i), b.Value(i)) << i;
}

TEST(AdamTest, UnsetHyperParametersTakeDocumentedDefaults) {
  Fixture a, b;
  a.Value(2) = b.Value(2) = 0.3f;
  a.Grad(2) = b.Grad(2) = -0.7f;
  auto unset = Make(&a.params, "adam", 0.0f);
  auto explicit_ = Make(&b.params, "adam", 0.0f, 0.9f, 0.999f, 1e-8f);
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(unset->Step(0.1f).ok());
    ASSERT_TRUE(explicit_->Step(0.1f).ok());
  }
  EXPECT_EQ(a.Value(2), b.Value(2));
}

}  // namespace
}  // namespace yoke::engine

namespace yoke::engine {
namespace {

// Step(lr, s) with gradients g is Step(lr) with gradients s * g (a
// power-of-two scale keeps it exact), for Adam and AdamW, on the SSE body and
// the scalar tail alike (5 elements: one group of 4 and a tail).
TEST(AdamTest, GradScaleEqualsScaledGradients) {
  for (const char* type : {"adam", "adamw"}) {
    Fixture a, b;
    auto oa = Make(&a.params, type, 0.01f);
    auto ob = Make(&b.params, type, 0.01f);
    const float g[5] = {0.5f, -1, 2, 0.25f, 3};
    for (int i = 0; i < 5; ++i) {
      a.Value(i) = b.Value(i) = 1.0f + i;
      a.Grad(i) = g[i];
      b.Grad(i) = g[i] * 0.125f;
    }
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(oa->Step(0.1f, 0.125f).ok());
      ASSERT_TRUE(ob->Step(0.1f).ok());
    }
    for (int i = 0; i < 5; ++i) EXPECT_EQ(a.Value(i), b.Value(i)) << type << " " << i;
  }
}

}  // namespace
}  // namespace yoke::engine
