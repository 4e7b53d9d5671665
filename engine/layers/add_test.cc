#include "engine/layers/add.h"

#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

TEST(AddTest, SumsThreeInputs) {
  AddLayer layer;
  ParamSet p;
  ASSERT_TRUE(layer.Build({{2}, {2}, {2}}, &p).ok());
  float a[] = {1, 2, 3, 4}, b[] = {10, 20, 30, 40}, c[] = {-1, 0.5f, 0, 100};
  Tensor ta = Tensor::Wrap(a, {2, 2}), tb = Tensor::Wrap(b, {2, 2}), tc = Tensor::Wrap(c, {2, 2});
  Tensor y = Tensor::Empty({2, 2});
  ASSERT_TRUE(layer.Forward({&ta, &tb, &tc}, &y, {}).ok());
  EXPECT_EQ(y.data<float>()[0], 10.0f);
  EXPECT_EQ(y.data<float>()[1], 22.5f);
  EXPECT_EQ(y.data<float>()[2], 33.0f);
  EXPECT_EQ(y.data<float>()[3], 144.0f);
}

TEST(AddTest, GradientsMatchFiniteDifferences) {
  AddLayer two, three;
  testing::CheckLayerGradients(&two, {{3, 4}, {3, 4}}, 2);
  testing::CheckLayerGradients(&three, {{5}, {5}, {5}}, 2);
}

TEST(AddTest, BackwardSkipsNullInputs) {
  AddLayer layer;
  ParamSet p;
  ASSERT_TRUE(layer.Build({{2}, {2}}, &p).ok());
  float dyv[] = {1, 2}, xv[] = {0, 0};
  Tensor dy = Tensor::Wrap(dyv, {1, 2}), x = Tensor::Wrap(xv, {1, 2});
  Tensor dx = Tensor::Zeros({1, 2});
  ASSERT_TRUE(layer.Backward({&x, &x}, dy, dy, {nullptr, &dx}, {}).ok());
  EXPECT_EQ(dx.data<float>()[1], 2.0f);
}

TEST(AddTest, RejectsMismatchedShapesNamingBoth) {
  AddLayer layer;
  ParamSet p;
  auto s = layer.Build({{4, 4, 8}, {4, 4, 16}}, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("(4, 4, 8)"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("(4, 4, 16)"), std::string::npos) << s.status();
  EXPECT_FALSE(layer.Build({{3}}, &p).ok());
}

TEST(AddTest, Registered) {
  v1::LayerSpec spec;
  spec.mutable_add();
  auto l = LayerRegistry::Global().Create(spec);
  ASSERT_TRUE(l.ok());
  EXPECT_STREQ((*l)->type(), "add");
}

}  // namespace
}  // namespace yoke::engine
