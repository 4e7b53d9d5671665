#include "engine/model_zoo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "engine/model.h"
#include "engine/rng.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

v1::ModelSpec Zoo(const std::string& name, int width = 0) {
  v1::ModelSpec m;
  m.set_zoo(name);
  m.set_width(width);
  return m;
}

int64_t Params(const std::string& name, const Shape& in, int k, int width = 0) {
  auto m = Model::Create(Zoo(name, width), in, k);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? (*m)->params().num_parameters() : -1;
}

// Published torchvision counts (trainable parameters, batch-norm gamma/beta
// included, running statistics not).
TEST(ModelZooTest, ResNetsHaveTorchvisionParameterCounts) {
  EXPECT_EQ(Params("resnet18", {224, 224, 3}, 1000), 11689512);
  EXPECT_EQ(Params("resnet34", {224, 224, 3}, 1000), 21797672);
  EXPECT_EQ(Params("resnet50", {224, 224, 3}, 1000), 25557032);
}

TEST(ModelZooTest, SmallImageAndNarrowVariants) {
  // CIFAR ResNet-18: the 3x3 stem (1,728 instead of 9,408 weights) and a
  // 10-way head (5,130 instead of 513,000): the well-known 11,173,962.
  EXPECT_EQ(Params("resnet18", {32, 32, 3}, 10), 11173962);
  // ResNet-50 on 64x64 keeps the ImageNet stem; only the head changes:
  // 25,557,032 - (2048 * 1000 + 1000) + (2048 * 10 + 10).
  EXPECT_EQ(Params("resnet50", {64, 64, 3}, 10), 23528522);
  // Width scales every conv: at width 32 a CIFAR ResNet-18 has
  // 3x3x3x32 stem + bn, then stages of 32/64/128/256 channels.
  auto m = Model::Create(Zoo("resnet18", 32), {32, 32, 3}, 10);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->output_shape(), (Shape{10}));
  // At width 64 the convolutions after the stem hold 11,173,962 - 5,130 (fc)
  // - 1,728 (stem) - 9,600 (gamma/beta of 4,800 bn channels) = 11,157,504
  // weights; halving every width quarters them (2,789,376). Stem 3x3x3x32 =
  // 864, bn 2 x 2,400 channels, fc 256x10 + 10.
  EXPECT_EQ((*m)->params().num_parameters(), 2789376 + 864 + 4800 + 2570);
}

TEST(ModelZooTest, StemDependsOnInputSize) {
  auto big = Model::Create(Zoo("resnet18", 8), {64, 64, 3}, 5);
  ASSERT_TRUE(big.ok()) << big.status();
  std::string s = (*big)->Summary();
  EXPECT_NE(s.find("max_pool2d"), std::string::npos) << s;
  // 64 -> conv/2 -> 32 -> pool/2 -> 16 -> stages 16, 8, 4, 2.
  EXPECT_NE(s.find("(2, 2, 64)"), std::string::npos) << s;
  auto small = Model::Create(Zoo("resnet18", 8), {32, 32, 3}, 5);
  ASSERT_TRUE(small.ok()) << small.status();
  s = (*small)->Summary();
  EXPECT_EQ(s.find("max_pool2d"), std::string::npos) << s;
  EXPECT_NE(s.find("(4, 4, 64)"), std::string::npos) << s;  // 32, 16, 8, 4
}

TEST(ModelZooTest, RejectsBadInputs) {
  auto m = Model::Create(Zoo("resnet18"), {784}, 10);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("resnet18 needs an image input"), std::string::npos)
      << m.status();
  m = Model::Create(Zoo("resnet18", -4), {32, 32, 3}, 10);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.width"), std::string::npos) << m.status();
  m = Model::Create(Zoo("resnet101"), {32, 32, 3}, 10);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("resnet50"), std::string::npos) << m.status();
}

// Runs a training step (forward + backward) and an eval forward on batch 2;
// every logit and gradient must be finite and each parameter must get some
// gradient.
void CheckStep(const std::string& name, const Shape& in, int width) {
  auto mo = Model::Create(Zoo(name, width), in, 10);
  ASSERT_TRUE(mo.ok()) << mo.status();
  Model& m = **mo;
  m.params().Initialize(7);
  Shape xs = in;
  xs.insert(xs.begin(), 2);
  Tensor x = Tensor::Empty(xs);
  common::Philox rng(3, 4);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 2 * rng.NextFloat() - 1;
  LayerContext ctx;
  auto logits = m.Forward(x, ctx);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(logits->shape(), (Shape{2, 10}));
  for (int64_t i = 0; i < logits->numel(); ++i) {
    ASSERT_TRUE(std::isfinite(logits->data<float>()[i]));
  }
  Tensor dl = Tensor::Empty({2, 10});
  for (int64_t i = 0; i < dl.numel(); ++i) dl.data<float>()[i] = 2 * rng.NextFloat() - 1;
  ASSERT_TRUE(m.Backward(dl, ctx).ok());
  for (const auto& e : m.params().entries()) {
    const float* g = m.params().flat_grads().data<float>() + e.offset;
    double norm = 0;
    for (int64_t i = 0; i < NumElements(e.shape); ++i) {
      ASSERT_TRUE(std::isfinite(g[i])) << e.name;
      norm += std::fabs(g[i]);
    }
    EXPECT_GT(norm, 0.0) << e.name << " got no gradient";
  }
  // Training moved the running statistics off their (0, 1) start.
  const Tensor& st = m.params().flat_state();
  double moved = 0;
  for (const auto& e : m.params().state_entries()) {
    const float* v = st.data<float>() + e.offset;
    const float start = e.name.find("running_var") != std::string::npos ? 1.0f : 0.0f;
    for (int64_t i = 0; i < NumElements(e.shape); ++i) moved += std::fabs(v[i] - start);
  }
  EXPECT_GT(moved, 0.0);
  ctx.training = false;
  auto eval = m.Forward(x, ctx);
  ASSERT_TRUE(eval.ok()) << eval.status();
  for (int64_t i = 0; i < eval->numel(); ++i) {
    ASSERT_TRUE(std::isfinite(eval->data<float>()[i]));
  }
}

TEST(ModelZooTest, SmallResNet18TrainsAStep) { CheckStep("resnet18", {32, 32, 3}, 16); }
TEST(ModelZooTest, NarrowResNet50TrainsAStep) { CheckStep("resnet50", {64, 64, 3}, 8); }

// Wall time of a training step (forward + backward, no optimizer) of the cnn
// zoo entry on Fashion-MNIST-sized input, batch 64. Not a target (targets live
// in bench/); run with --gtest_also_run_disabled_tests.
TEST(ModelZooTest, DISABLED_CnnStepTiming) {
  auto mo = Model::Create(Zoo("cnn"), {28, 28, 1}, 10);
  ASSERT_TRUE(mo.ok()) << mo.status();
  Model& m = **mo;
  m.params().Initialize(1);
  Tensor x = Tensor::Empty({64, 28, 28, 1}), dl = Tensor::Empty({64, 10});
  common::Philox rng(1, 2);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = rng.NextFloat();
  for (int64_t i = 0; i < dl.numel(); ++i) dl.data<float>()[i] = rng.NextFloat() - 0.5f;
  LayerContext ctx;
  auto step = [&] {
    ASSERT_TRUE(m.Forward(x, ctx).ok());
    ASSERT_TRUE(m.Backward(dl, ctx).ok());
  };
  for (int i = 0; i < 5; ++i) step();
  const int iters = 30;
  double best = 1e9, total = 0;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ms);
    total += ms;
  }
  std::printf("cnn step (fwd+bwd), batch 64: mean %.2f ms, best %.2f ms\n", total / iters,
              best);
}

}  // namespace
}  // namespace yoke::engine
