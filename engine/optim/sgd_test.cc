#include "engine/optim/sgd.h"

#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

// A ParamSet with two entries, {3} and {2}, so the flat buffer has padding.
struct Fixture {
  ParamSet params;
  Fixture() {
    params.Declare("l/a", {3}, Init::Constant(0));
    params.Declare("l/b", {2}, Init::Constant(0));
    EXPECT_TRUE(params.Finalize().ok());
  }
  void Set(const std::vector<float>& values, const std::vector<float>& grads) {
    for (int i = 0; i < 5; ++i) {
      Value(i) = values[i];
      Grad(i) = grads[i];
    }
  }
  void SetGrads(const std::vector<float>& grads) {
    for (int i = 0; i < 5; ++i) Grad(i) = grads[i];
  }
  // Logical element i: 0..2 in "a", 3..4 in "b".
  float& Value(int i) { return params.value(i < 3 ? 0 : 1).data<float>()[i < 3 ? i : i - 3]; }
  float& Grad(int i) { return params.grad(i < 3 ? 0 : 1).data<float>()[i < 3 ? i : i - 3]; }
};

std::unique_ptr<Optimizer> Make(ParamSet* p, float lr, float momentum, bool nesterov, float wd) {
  v1::OptimizerSpec spec;
  spec.set_type("sgd");
  spec.set_lr(lr);
  spec.set_momentum(momentum);
  spec.set_nesterov(nesterov);
  spec.set_weight_decay(wd);
  auto o = CreateOptimizer(spec, p);
  EXPECT_TRUE(o.ok()) << o.status();
  return std::move(o).value();
}

// Single element p = 1, g = 0.5 each step, lr = 0.1; values worked by hand.
TEST(SgdTest, HandComputedTwoSteps) {
  struct Case {
    float momentum;
    bool nesterov;
    float wd;
    double after1, after2;
  } cases[] = {
      // plain: p -= 0.05 twice
      {0.0f, false, 0.0f, 0.95, 0.90},
      // nesterov without momentum: the same plain steps (job validation, not
      // the engine, refuses this combination)
      {0.0f, true, 0.0f, 0.95, 0.90},
      // momentum: v1 = 0.5 -> 0.95; v2 = 0.45 + 0.5 = 0.95 -> 0.95 - 0.095
      {0.9f, false, 0.0f, 0.95, 0.855},
      // nesterov: p1 = 1 - 0.1 (0.5 + 0.45); v2 = 0.95, p2 = 0.905 - 0.1 (0.5 + 0.855)
      {0.9f, true, 0.0f, 0.905, 0.7695},
      // wd 0.1: g1 = 0.6, v1 = 0.6 -> 0.94; g2 = 0.5 + 0.094 = 0.594,
      // v2 = 0.54 + 0.594 = 1.134 -> 0.94 - 0.1134
      {0.9f, false, 0.1f, 0.94, 0.8266},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "momentum " << c.momentum << " nesterov " << c.nesterov << " wd " << c.wd);
    Fixture f;
    f.Set({1, 0, 0, 0, 0}, {0.5f, 0, 0, 0, 0});
    auto opt = Make(&f.params, 0.1f, c.momentum, c.nesterov, c.wd);
    ASSERT_TRUE(opt->Step(0.1f).ok());
    EXPECT_NEAR(f.Value(0), c.after1, 1e-6);
    ASSERT_TRUE(opt->Step(0.1f).ok());
    EXPECT_NEAR(f.Value(0), c.after2, 1e-6);
    EXPECT_EQ(opt->step_count(), 2);
  }
}

// Three steps with changing gradients and learning rates on every element,
// against the update rule written out in double.
TEST(SgdTest, ThreeStepsMatchDoubleReference) {
  const std::vector<float> p0 = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
  const std::vector<std::vector<float>> grads = {{0.1f, -0.2f, 0.3f, -0.4f, 0.5f},
                                                 {-0.3f, 0.1f, 0.0f, 0.2f, -0.1f},
                                                 {0.2f, 0.2f, -0.5f, 0.05f, 0.3f}};
  const float lrs[] = {0.1f, 0.05f, 0.2f};
  for (bool nesterov : {false, true}) {
    const double mu = 0.8, wd = 0.01;
    Fixture f;
    f.Set(p0, grads[0]);
    auto opt = Make(&f.params, 0.1f, mu, nesterov, wd);
    std::vector<double> p(p0.begin(), p0.end()), v(5, 0.0);
    for (int s = 0; s < 3; ++s) {
      f.SetGrads(grads[s]);
      ASSERT_TRUE(opt->Step(lrs[s]).ok());
      for (int i = 0; i < 5; ++i) {
        const double g = grads[s][i] + wd * p[i];
        v[i] = s == 0 ? g : mu * v[i] + g;
        p[i] -= lrs[s] * (nesterov ? g + mu * v[i] : v[i]);
      }
    }
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(f.Value(i), p[i], 1e-6) << i;
    // Padding stays zero.
    const float* flat = f.params.flat_values().data<float>();
    for (int64_t i = 3; i < 16; ++i) EXPECT_EQ(flat[i], 0.0f) << i;
  }
}

TEST(SgdTest, StateRestoreContinuesIdentically) {
  const std::vector<float> p0 = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
  const std::vector<float> g0 = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f};
  const std::vector<float> g1 = {-0.3f, 0.1f, 0.0f, 0.2f, -0.1f};
  Fixture a, b;
  a.Set(p0, g0);
  auto oa = Make(&a.params, 0.1f, 0.9f, true, 0.0f);
  ASSERT_TRUE(oa->Step(0.1f).ok());
  // "Checkpoint" a into b: values, optimizer state and step count.
  b.params.flat_values().CopyFrom(a.params.flat_values());
  auto ob = Make(&b.params, 0.1f, 0.9f, true, 0.0f);
  auto sa = oa->State(), sb = ob->State();
  ASSERT_EQ(sa.size(), 1u);
  EXPECT_EQ(sa[0].first, "momentum");
  sb[0].second.CopyFrom(sa[0].second);
  ob->set_step_count(oa->step_count());
  a.SetGrads(g1);
  b.SetGrads(g1);
  ASSERT_TRUE(oa->Step(0.1f).ok());
  ASSERT_TRUE(ob->Step(0.1f).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.Value(i), b.Value(i)) << i;
  EXPECT_EQ(ob->step_count(), 2);

  Fixture c;
  EXPECT_TRUE(Make(&c.params, 0.1f, 0.0f, false, 0.0f)->State().empty());
}

TEST(SgdTest, LargeBufferTakesTheParallelPath) {
  ParamSet params;
  params.Declare("w", {1 << 20}, Init::Constant(1.0f));
  EXPECT_TRUE(params.Finalize().ok());
  params.Initialize(0);
  float* g = params.flat_grads().data<float>();
  const int64_t n = params.flat_values().numel();
  for (int64_t i = 0; i < n; ++i) g[i] = (i % 5) * 0.25f;
  auto opt = Make(&params, 0.5f, 0.9f, false, 0.0f);
  ASSERT_TRUE(opt->Step(0.5f).ok());
  ASSERT_TRUE(opt->Step(0.5f).ok());
  // p = 1 - 0.5 g - 0.5 (1.9 g) = 1 - 1.45 g
  const float* p = params.flat_values().data<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(p[i], 1.0 - 1.45 * ((i % 5) * 0.25), 1e-6) << i;
}

TEST(SgdTest, StepRejectsBadLearningRate) {
  Fixture f;
  auto opt = Make(&f.params, 0.1f, 0.0f, false, 0.0f);
  EXPECT_EQ(opt->Step(-1.0f).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->Step(std::nanf("")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(opt->step_count(), 0);
}

}  // namespace
}  // namespace yoke::engine

namespace yoke::engine {
namespace {

// Step(lr, s) with gradients g is Step(lr) with gradients s * g, for every
// variant (the data-parallel trainer folds 1 / global count in this way). A
// power-of-two scale keeps the comparison exact.
TEST(SgdTest, GradScaleEqualsScaledGradients) {
  for (float momentum : {0.0f, 0.9f}) {
    for (bool nesterov : {false, true}) {
      if (nesterov && momentum == 0.0f) continue;
      Fixture a, b;
      auto oa = Make(&a.params, 0.1f, momentum, nesterov, 0.01f);
      auto ob = Make(&b.params, 0.1f, momentum, nesterov, 0.01f);
      a.Set({1, 2, 3, 4, 5}, {0.5f, -1, 2, 0.25f, 3});
      b.Set({1, 2, 3, 4, 5}, {0.125f, -0.25f, 0.5f, 0.0625f, 0.75f});
      for (int step = 0; step < 2; ++step) {
        ASSERT_TRUE(oa->Step(0.1f, 0.25f).ok());
        ASSERT_TRUE(ob->Step(0.1f).ok());
      }
      for (int i = 0; i < 5; ++i) EXPECT_EQ(a.Value(i), b.Value(i)) << i;
    }
  }
}

TEST(SgdTest, RejectsBadGradScale) {
  Fixture f;
  auto o = Make(&f.params, 0.1f, 0.0f, false, 0.0f);
  EXPECT_EQ(o->Step(0.1f, 0.0f).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o->Step(0.1f, std::numeric_limits<float>::infinity()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoke::engine
