#include "engine/layers/softmax.h"

#include <cmath>

#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

TEST(SoftmaxTest, GradientsMatchFiniteDifferences) {
  SoftmaxLayer layer;
  testing::GradCheckOptions o;
  o.input_lo = -2.0f;
  o.input_hi = 2.0f;
  o.step = 1e-3f;
  testing::CheckLayerGradients(&layer, {{3, 5}}, 2, o);
}

TEST(SoftmaxTest, ForwardOverLastDimMatchesHandComputed) {
  SoftmaxLayer layer;
  ParamSet p;
  ASSERT_TRUE(layer.Build({{2, 3}}, &p).ok());
  // Row 0: exp = (1, 2, 3) -> (1/6, 2/6, 3/6). Row 1: equal logits -> 1/3 each.
  float x[] = {0.0f, std::log(2.0f), std::log(3.0f), 7.0f, 7.0f, 7.0f};
  Tensor xt = Tensor::Wrap(x, {1, 2, 3});
  Tensor y = Tensor::Empty({1, 2, 3});
  ASSERT_TRUE(layer.Forward({&xt}, &y, {}).ok());
  const float* v = y.data<float>();
  EXPECT_NEAR(v[0], 1.0 / 6, 1e-6);
  EXPECT_NEAR(v[1], 2.0 / 6, 1e-6);
  EXPECT_NEAR(v[2], 3.0 / 6, 1e-6);
  for (int j = 3; j < 6; ++j) EXPECT_NEAR(v[j], 1.0 / 3, 1e-6);
}

TEST(SoftmaxTest, HugeLogitsStayFinite) {
  SoftmaxLayer layer;
  ParamSet p;
  ASSERT_TRUE(layer.Build({{3}}, &p).ok());
  // exp(1e4) overflows float; the shifted form gives (e^0, e^-ln3... ) exactly.
  float x[] = {1e4f, 1e4f, -1e4f};
  Tensor xt = Tensor::Wrap(x, {1, 3});
  Tensor y = Tensor::Empty({1, 3});
  ASSERT_TRUE(layer.Forward({&xt}, &y, {}).ok());
  EXPECT_FLOAT_EQ(y.data<float>()[0], 0.5f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], 0.5f);
  EXPECT_EQ(y.data<float>()[2], 0.0f);
}

TEST(SoftmaxTest, RegisteredAndRejectsScalarInput) {
  v1::LayerSpec spec;
  spec.mutable_softmax();
  auto l = LayerRegistry::Global().Create(spec);
  ASSERT_TRUE(l.ok());
  ParamSet p;
  EXPECT_FALSE((*l)->Build({{}}, &p).ok());
}

}  // namespace
}  // namespace yoke::engine
