#include "engine/layers/flatten.h"

#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

TEST(FlattenTest, ShapeAndChannelsLastOrder) {
  FlattenLayer layer;
  ParamSet p;
  auto s = layer.Build({{2, 3, 4}}, &p);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, Shape{24});
  Tensor x = Tensor::Empty({2, 2, 3, 4});
  for (int i = 0; i < 48; ++i) x.data<float>()[i] = static_cast<float>(i);
  Tensor y = Tensor::Empty({2, 24});
  ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
  // Element (n=1, h=1, w=2, c=3) of x sits at feature h*12 + w*4 + c = 23 of row 1.
  EXPECT_EQ(y.data<float>()[24 + 23], 47.0f);
  EXPECT_EQ(y.data<float>()[5], 5.0f);
}

TEST(FlattenTest, GradientsMatchFiniteDifferences) {
  FlattenLayer layer;
  testing::CheckLayerGradients(&layer, {{2, 3, 2}}, 3);
}

TEST(FlattenTest, Registered) {
  v1::LayerSpec spec;
  spec.mutable_flatten();
  auto l = LayerRegistry::Global().Create(spec);
  ASSERT_TRUE(l.ok());
  EXPECT_STREQ((*l)->type(), "flatten");
}

}  // namespace
}  // namespace yoke::engine
