#include "engine/layers/dropout.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

constexpr int64_t kN = 1 << 20;  // above the parallel threshold

struct DropRun {
  std::vector<float> y;
  std::vector<uint8_t> mask;
};

// Forward of an all-ones (kN) tensor through `layer`.
DropRun Forward(DropoutLayer* layer, const LayerContext& ctx) {
  Tensor x = Tensor::Empty({16, kN / 16});
  for (int64_t i = 0; i < kN; ++i) x.data<float>()[i] = 1.0f;
  Tensor y = Tensor::Empty(x.shape());
  EXPECT_TRUE(layer->Forward({&x}, &y, ctx).ok());
  DropRun r;
  r.y.assign(y.data<float>(), y.data<float>() + kN);
  if (layer->mask().defined()) {
    r.mask.assign(layer->mask().data<uint8_t>(), layer->mask().data<uint8_t>() + kN);
  }
  return r;
}

DropoutLayer Built(float rate, int index) {
  DropoutLayer layer(rate);
  layer.set_index(index);
  ParamSet p;
  EXPECT_TRUE(layer.Build({{kN / 16}}, &p).ok());
  return layer;
}

TEST(DropoutTest, DropsAboutRateAndScalesTheRest) {
  for (float rate : {0.1f, 0.5f, 0.8f}) {
    DropoutLayer layer = Built(rate, 3);
    LayerContext ctx;
    ctx.seed = 42;
    ctx.step = 7;
    DropRun r = Forward(&layer, ctx);
    int64_t dropped = 0;
    for (int64_t i = 0; i < kN; ++i) {
      if (r.y[i] == 0.0f) {
        ++dropped;
        ASSERT_EQ(r.mask[i], 0);
      } else {
        ASSERT_FLOAT_EQ(r.y[i], 1.0f / (1.0f - rate)) << i;
        ASSERT_EQ(r.mask[i], 1);
      }
    }
    // Binomial sd = sqrt(rate (1 - rate) / n) < 5e-4; allow ~6 sd.
    EXPECT_NEAR(static_cast<double>(dropped) / kN, rate, 3e-3) << "rate " << rate;
  }
}

TEST(DropoutTest, EvalAndZeroRateAreIdentity) {
  DropoutLayer layer = Built(0.5f, 0);
  LayerContext eval;
  eval.training = false;
  DropRun r = Forward(&layer, eval);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(r.y[i], 1.0f);
  // Backward in eval passes the gradient through unchanged.
  float dyv[] = {3, -2}, xv[] = {1, 1};
  DropoutLayer small(0.5f);
  ParamSet p;
  ASSERT_TRUE(small.Build({{2}}, &p).ok());
  Tensor x = Tensor::Wrap(xv, {1, 2}), dy = Tensor::Wrap(dyv, {1, 2});
  Tensor y = Tensor::Empty({1, 2}), dx = Tensor::Empty({1, 2});
  ASSERT_TRUE(small.Forward({&x}, &y, eval).ok());
  ASSERT_TRUE(small.Backward({&x}, y, dy, {&dx}, eval).ok());
  EXPECT_EQ(dx.data<float>()[0], 3.0f);
  EXPECT_EQ(dx.data<float>()[1], -2.0f);

  DropoutLayer none = Built(0.0f, 0);
  DropRun z = Forward(&none, LayerContext{});
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(z.y[i], 1.0f);
}

TEST(DropoutTest, MaskIsAPureFunctionOfSeedStepReplicaAndIndex) {
  LayerContext ctx;
  ctx.seed = 9;
  ctx.step = 100;
  ctx.replica = 1;
  DropoutLayer a = Built(0.5f, 2), b = Built(0.5f, 2);
  DropRun ra = Forward(&a, ctx);
  // A fresh layer (as after a restart) and a single thread reproduce it.
  omp_set_num_threads(1);
  DropRun rb = Forward(&b, ctx);
  omp_set_num_threads(2);
  EXPECT_EQ(ra.mask, rb.mask);

  auto differs = [&](LayerContext c, int index) {
    DropoutLayer l = Built(0.5f, index);
    return Forward(&l, c).mask != ra.mask;
  };
  LayerContext next = ctx;
  next.step = 101;
  EXPECT_TRUE(differs(next, 2)) << "step";
  LayerContext other_replica = ctx;
  other_replica.replica = 0;
  EXPECT_TRUE(differs(other_replica, 2)) << "replica";
  LayerContext other_seed = ctx;
  other_seed.seed = 10;
  EXPECT_TRUE(differs(other_seed, 2)) << "seed";
  EXPECT_TRUE(differs(ctx, 3)) << "layer index";
}

TEST(DropoutTest, BackwardUsesTheForwardMask) {
  DropoutLayer layer(0.5f);
  ParamSet p;
  ASSERT_TRUE(layer.Build({{64}}, &p).ok());
  Tensor x = Tensor::Empty({1, 64}), dy = Tensor::Empty({1, 64});
  for (int i = 0; i < 64; ++i) {
    x.data<float>()[i] = 1.0f + i;
    dy.data<float>()[i] = 0.5f * i - 3.0f;
  }
  Tensor y = Tensor::Empty({1, 64}), dx = Tensor::Empty({1, 64});
  LayerContext ctx;
  ctx.step = 5;
  ASSERT_TRUE(layer.Forward({&x}, &y, ctx).ok());
  ASSERT_TRUE(layer.Backward({&x}, y, dy, {&dx}, ctx).ok());
  int kept = 0;
  for (int i = 0; i < 64; ++i) {
    // y = 2x where kept; dx must be 2 dy exactly there, 0 elsewhere.
    const bool keep = y.data<float>()[i] != 0.0f;
    kept += keep;
    EXPECT_EQ(dx.data<float>()[i], keep ? 2.0f * dy.data<float>()[i] : 0.0f) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 64);
}

TEST(DropoutTest, GradientCheckInTrainingMode) {
  DropoutLayer layer(0.3f);
  testing::CheckLayerGradients(&layer, {{4, 5}}, 3);
}

TEST(DropoutTest, RejectsRateOutsideUnitInterval) {
  v1::LayerSpec spec;
  for (float bad : {1.0f, -0.1f, std::nanf("")}) {
    spec.mutable_dropout()->set_rate(bad);
    auto l = LayerRegistry::Global().Create(spec);
    ASSERT_FALSE(l.ok());
    EXPECT_NE(l.status().message().find("dropout.rate"), std::string::npos);
  }
  spec.mutable_dropout()->set_rate(0.25f);
  EXPECT_TRUE(LayerRegistry::Global().Create(spec).ok());
}

}  // namespace
}  // namespace yoke::engine
