#include "engine/layers/activation.h"

#include <cmath>
#include <vector>

#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

using Kind = ActivationLayer::Kind;

// Runs Forward on a (1, n) tensor of `xs` and returns the outputs.
std::vector<float> Apply(Layer* layer, std::vector<float> xs) {
  ParamSet p;
  EXPECT_TRUE(layer->Build({{static_cast<int64_t>(xs.size())}}, &p).ok());
  Tensor x = Tensor::Wrap(xs.data(), {1, static_cast<int64_t>(xs.size())});
  Tensor y = Tensor::Empty(x.shape());
  EXPECT_TRUE(layer->Forward({&x}, &y, {}).ok());
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

TEST(ActivationTest, ReluGradientsBothSidesOfTheKink) {
  testing::GradCheckOptions pos, neg;
  pos.input_lo = 0.05f;
  pos.input_hi = 1.0f;
  neg.input_lo = -1.0f;
  neg.input_hi = -0.05f;
  ActivationLayer relu(Kind::kRelu);
  testing::CheckLayerGradients(&relu, {{3, 4, 5}}, 2, pos);
  testing::CheckLayerGradients(&relu, {{3, 4, 5}}, 2, neg);
  ActivationLayer leaky(Kind::kLeakyRelu, 0.2f);
  testing::CheckLayerGradients(&leaky, {{3, 4, 5}}, 2, pos);
  testing::CheckLayerGradients(&leaky, {{3, 4, 5}}, 2, neg);
}

TEST(ActivationTest, SmoothGradientsMatchFiniteDifferences) {
  testing::GradCheckOptions o;
  o.input_lo = -3.0f;
  o.input_hi = 3.0f;
  o.step = 1e-3f;
  for (Kind k : {Kind::kSigmoid, Kind::kTanh, Kind::kGelu}) {
    ActivationLayer layer(k);
    SCOPED_TRACE(layer.type());
    testing::CheckLayerGradients(&layer, {{4, 6}}, 3, o);
  }
}

TEST(ActivationTest, ForwardMatchesHandComputed) {
  ActivationLayer relu(Kind::kRelu);
  EXPECT_EQ(Apply(&relu, {-1.0f, 0.0f, 2.5f}), (std::vector<float>{0.0f, 0.0f, 2.5f}));

  ActivationLayer leaky(Kind::kLeakyRelu, 0.01f);
  auto l = Apply(&leaky, {-2.0f, 3.0f});
  EXPECT_FLOAT_EQ(l[0], -0.02f);
  EXPECT_FLOAT_EQ(l[1], 3.0f);

  // sigmoid(ln 3) = 3 / (3 + 1); extremes saturate without NaN.
  ActivationLayer sig(Kind::kSigmoid);
  auto s = Apply(&sig, {0.0f, std::log(3.0f), -100.0f, 100.0f});
  EXPECT_FLOAT_EQ(s[0], 0.5f);
  EXPECT_FLOAT_EQ(s[1], 0.75f);
  EXPECT_EQ(s[2], 0.0f);
  EXPECT_EQ(s[3], 1.0f);

  // tanh(ln 2) = (2 - 1/2) / (2 + 1/2)
  ActivationLayer th(Kind::kTanh);
  EXPECT_FLOAT_EQ(Apply(&th, {std::log(2.0f)})[0], 0.6f);

  // gelu(x) = x * Phi(x); Phi(1) = 0.841344746068543, Phi(2) = 0.977249868051821
  // (standard normal table).
  ActivationLayer gelu(Kind::kGelu);
  auto g = Apply(&gelu, {1.0f, -1.0f, 2.0f, 0.0f});
  EXPECT_NEAR(g[0], 0.841344746f, 1e-6);
  EXPECT_NEAR(g[1], -(1.0f - 0.841344746f), 1e-6);
  EXPECT_NEAR(g[2], 2.0f * 0.977249868f, 1e-6);
  EXPECT_EQ(g[3], 0.0f);
}

// Tensors above the OpenMP threshold take the parallel path; every element
// must still be right.
TEST(ActivationTest, LargeTensorReluAndBackward) {
  const int64_t n = 1 << 18;
  Tensor x = Tensor::Empty({4, n / 4});
  Tensor dy = Tensor::Empty({4, n / 4});
  for (int64_t i = 0; i < n; ++i) {
    x.data<float>()[i] = (i % 7) - 3.0f;  // -3..3
    dy.data<float>()[i] = 0.5f + (i % 3);
  }
  ActivationLayer relu(Kind::kRelu);
  ParamSet p;
  ASSERT_TRUE(relu.Build({{n / 4}}, &p).ok());
  Tensor y = Tensor::Empty(x.shape()), dx = Tensor::Empty(x.shape());
  ASSERT_TRUE(relu.Forward({&x}, &y, {}).ok());
  ASSERT_TRUE(relu.Backward({&x}, y, dy, {&dx}, {}).ok());
  for (int64_t i = 0; i < n; ++i) {
    const float xv = (i % 7) - 3.0f;
    ASSERT_EQ(y.data<float>()[i], xv > 0 ? xv : 0.0f) << i;
    ASSERT_EQ(dx.data<float>()[i], xv > 0 ? 0.5f + (i % 3) : 0.0f) << i;
  }
}

TEST(ActivationTest, RegistryCreatesEveryNameAndLeakyDefault) {
  v1::LayerSpec spec;
  spec.mutable_leaky_relu();  // alpha left 0 -> default 0.01
  auto leaky = LayerRegistry::Global().Create(spec);
  ASSERT_TRUE(leaky.ok()) << leaky.status();
  EXPECT_STREQ((*leaky)->type(), "leaky_relu");
  EXPECT_FLOAT_EQ(Apply(leaky->get(), {-1.0f})[0], -0.01f);

  spec.mutable_leaky_relu()->set_alpha(0.25f);
  leaky = LayerRegistry::Global().Create(spec);
  ASSERT_TRUE(leaky.ok());
  EXPECT_FLOAT_EQ(Apply(leaky->get(), {-2.0f})[0], -0.5f);

  spec.mutable_relu();
  EXPECT_STREQ((*LayerRegistry::Global().Create(spec))->type(), "relu");
  spec.mutable_sigmoid();
  EXPECT_STREQ((*LayerRegistry::Global().Create(spec))->type(), "sigmoid");
  spec.mutable_tanh();
  EXPECT_STREQ((*LayerRegistry::Global().Create(spec))->type(), "tanh");
  spec.mutable_gelu();
  EXPECT_STREQ((*LayerRegistry::Global().Create(spec))->type(), "gelu");
}

}  // namespace
}  // namespace yoke::engine
