#include "engine/zoo/model_zoo.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/losses/softmax_cross_entropy.h"
#include "engine/model.h"
#include "engine/optim/optimizer.h"
#include "engine/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

v1::ModelSpec Zoo(const std::string& name, int width = 0) {
  v1::ModelSpec m;
  m.set_zoo(name);
  m.set_width(width);
  return m;
}

// Small enough that one step's first-order decrease lr * |g|^2 dominates.
constexpr float kLr = 0.01f;

int64_t Params(const std::string& name, const Shape& in, int k, int width = 0) {
  auto m = Model::Create(Zoo(name, width), in, k);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? (*m)->params().num_parameters() : -1;
}

// The zoo builds every name of its list (engine/names/engine_names.h, which
// job validation reads) and refuses every other one, listing them all.
TEST(ModelZooTest, ExpandsExactlyTheListedNames) {
  ASSERT_FALSE(ZooNames().empty());
  for (const std::string& name : ZooNames()) {
    auto layers = ExpandZoo(Zoo(name), {32, 32, 3}, 10);
    ASSERT_TRUE(layers.ok()) << name << ": " << layers.status();
    EXPECT_FALSE(layers->empty()) << name;
  }
  for (const char* name : {"resnet21", "MLP", "cnn ", "resnet", ""}) {
    auto layers = ExpandZoo(Zoo(name), {32, 32, 3}, 10);
    ASSERT_FALSE(layers.ok()) << "'" << name << "' was built";
    EXPECT_EQ(layers.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(layers.status().message()),
                testing::HasSubstr(absl::StrCat("model.zoo: unknown model '", name, "' (known: ",
                                                absl::StrJoin(ZooNames(), ", "), ")")));
  }
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

// He et al. 2015, section 4.2: ResNet-20 for CIFAR-10 has 0.27M parameters,
// 269,722 with the paper's zero-padded identity shortcuts (option A). Ours
// project the two shortcuts that change shape (option B): 1x1 convs of
// 16x32 and 32x64 weights and their batch norms' 2 x (32 + 64).
TEST(ModelZooTest, CifarResNetsFollowThePaper) {
  EXPECT_EQ(Params("resnet20", {32, 32, 3}, 10), 269722 + 16 * 32 + 32 * 64 + 2 * (32 + 64));
  // Depth 6n + 2: each extra block per stage adds two 3x3 convs and two
  // batch norms in each of the three stages.
  const int64_t per_n = 2 * (9 * 16 * 16 + 9 * 32 * 32 + 9 * 64 * 64) + 4 * (16 + 32 + 64);
  EXPECT_EQ(Params("resnet32", {32, 32, 3}, 10) - Params("resnet20", {32, 32, 3}, 10), 2 * per_n);
  EXPECT_EQ(Params("resnet56", {32, 32, 3}, 10) - Params("resnet20", {32, 32, 3}, 10), 6 * per_n);
  // One input channel (Fashion-MNIST) changes only the stem: 9 x 16 fewer
  // weights per channel dropped; the small stem even at 64x64 and above.
  EXPECT_EQ(Params("resnet20", {28, 28, 1}, 10), Params("resnet20", {32, 32, 3}, 10) - 2 * 9 * 16);
  auto m = Model::Create(Zoo("resnet20"), {64, 64, 3}, 10);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->Summary().find("maxpool"), std::string::npos) << (*m)->Summary();
  EXPECT_EQ(Params("resnet20", {64, 64, 3}, 10), Params("resnet20", {32, 32, 3}, 10));
  auto bad = Model::Create(Zoo("resnet21"), {32, 32, 3}, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("resnet20"), std::string::npos) << bad.status();
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

// Mean softmax cross-entropy of `m` on (x, y) in training mode (batch-norm
// uses the batch's statistics, so the value depends only on the parameters).
// With `backward`, also leaves d(mean loss)/dθ in the model's gradients.
double TrainingLoss(Model& m, const Tensor& x, const Tensor& y, LayerContext& ctx, bool backward) {
  const int64_t n = x.shape()[0];
  auto logits = m.Forward(x, ctx);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return NAN;
  SoftmaxCrossEntropy loss;
  Tensor dl = Tensor::Empty(logits->shape());
  auto r = loss.Compute(*logits, y, 1.0f / n, backward ? &dl : nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  if (backward) {
    absl::Status s = m.Backward(dl, ctx);
    EXPECT_TRUE(s.ok()) << s;
  }
  return r.ok() ? r->loss_sum / n : NAN;
}

// Trains `name` on one fixed batch of 2 with plain SGD (seeded init, inputs
// and labels) and checks that it learns:
//  - forward gives finite (2, 10) logits; every parameter gets a finite,
//    non-zero gradient; the running statistics leave their (0, 1) start;
//  - one step moves every parameter by exactly -lr * grad (so the optimizer
//    reads the gradient of the same entry, with the right sign and scale);
//  - the loss on the batch goes down after that step, and further after
//    two more;
//  - the eval-mode forward (running statistics) stays finite.
void CheckStep(const std::string& name, const Shape& in, int width) {
  auto mo = Model::Create(Zoo(name, width), in, 10);
  ASSERT_TRUE(mo.ok()) << mo.status();
  Model& m = **mo;
  m.params().Initialize(7);
  const int64_t n = 2;
  Shape xs = in;
  xs.insert(xs.begin(), n);
  Tensor x = Tensor::Empty(xs);
  common::Philox rng(3, 4);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 2 * rng.NextFloat() - 1;
  Tensor y = Tensor::Empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(rng.Uniform(10));
  LayerContext ctx;

  auto logits = m.Forward(x, ctx);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(logits->shape(), (Shape{n, 10}));
  for (int64_t i = 0; i < logits->numel(); ++i) {
    ASSERT_TRUE(std::isfinite(logits->data<float>()[i]));
  }
  SoftmaxCrossEntropy loss;
  Tensor dl = Tensor::Empty(logits->shape());
  auto r0 = loss.Compute(*logits, y, 1.0f / n, &dl);
  ASSERT_TRUE(r0.ok()) << r0.status();
  const double loss0 = r0->loss_sum / n;
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

  // One plain SGD step: θ' = θ - lr * g, element by element.
  v1::OptimizerSpec sgd;
  sgd.set_type("sgd");
  sgd.set_lr(kLr);
  auto opt = CreateOptimizer(sgd, &m.params());
  ASSERT_TRUE(opt.ok()) << opt.status();
  const Tensor& values = m.params().flat_values();
  const Tensor& grads = m.params().flat_grads();
  const std::vector<float> before(values.data<float>(), values.data<float>() + values.numel());
  const std::vector<float> grad(grads.data<float>(), grads.data<float>() + grads.numel());
  ASSERT_TRUE((*opt)->Step(kLr).ok());
  for (const auto& e : m.params().entries()) {
    const float* after = values.data<float>() + e.offset;
    int wrong = 0;
    for (int64_t i = 0; i < NumElements(e.shape); ++i) {
      const int64_t k = e.offset + i;
      const double want = static_cast<double>(before[k]) - kLr * static_cast<double>(grad[k]);
      const double tol = 1e-6 * (std::fabs(before[k]) + kLr * std::fabs(grad[k])) + 1e-12;
      if (std::fabs(after[i] - want) > tol && wrong++ < 3) {
        ADD_FAILURE() << e.name << "[" << i << "]: " << before[k] << " - " << kLr << " * "
                      << grad[k] << " should be " << want << ", got " << after[i];
      }
    }
    EXPECT_EQ(wrong, 0) << e.name << ": elements not moved by -lr * grad";
  }
  const double loss1 = TrainingLoss(m, x, y, ctx, /*backward=*/true);
  EXPECT_LT(loss1, loss0) << "one SGD step did not lower the loss on its own batch";
  ASSERT_TRUE((*opt)->Step(kLr).ok());
  TrainingLoss(m, x, y, ctx, /*backward=*/true);
  ASSERT_TRUE((*opt)->Step(kLr).ok());
  const double loss3 = TrainingLoss(m, x, y, ctx, /*backward=*/false);
  EXPECT_LT(loss3, loss1) << "loss " << loss0 << " -> " << loss1 << " -> " << loss3;

  ctx.training = false;
  auto eval = m.Forward(x, ctx);
  ASSERT_TRUE(eval.ok()) << eval.status();
  for (int64_t i = 0; i < eval->numel(); ++i) {
    ASSERT_TRUE(std::isfinite(eval->data<float>()[i]));
  }
}

TEST(ModelZooTest, SmallResNet18TrainsAStep) { CheckStep("resnet18", {32, 32, 3}, 16); }
TEST(ModelZooTest, NarrowResNet50TrainsAStep) { CheckStep("resnet50", {64, 64, 3}, 8); }

}  // namespace
}  // namespace yoke::engine
