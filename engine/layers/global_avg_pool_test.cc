#include "engine/layers/global_avg_pool.h"

#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

TEST(GlobalAvgPoolTest, ForwardMatchesHandComputed) {
  GlobalAvgPoolLayer layer;
  ParamSet p;
  ASSERT_EQ(*layer.Build({{2, 2, 2}}, &p), (Shape{2}));
  // Two examples of (2, 2, 2): channel 0 then 1 at each position.
  float x[] = {1,  10, 2,  20, 3,  30, 4,  40,  //
               -1, 0,  -1, 0,  -1, 0,  -1, 8};
  Tensor xt = Tensor::Wrap(x, {2, 2, 2, 2});
  Tensor y = Tensor::Empty({2, 2});
  ASSERT_TRUE(layer.Forward({&xt}, &y, {}).ok());
  EXPECT_FLOAT_EQ(y.data<float>()[0], 2.5f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], 25.0f);
  EXPECT_FLOAT_EQ(y.data<float>()[2], -1.0f);
  EXPECT_FLOAT_EQ(y.data<float>()[3], 2.0f);
  float dy[] = {4, 8, -4, 1};
  Tensor dyt = Tensor::Wrap(dy, {2, 2});
  Tensor dx = Tensor::Empty({2, 2, 2, 2});
  ASSERT_TRUE(layer.Backward({&xt}, y, dyt, {&dx}, {}).ok());
  for (int pos = 0; pos < 4; ++pos) {
    EXPECT_FLOAT_EQ(dx.data<float>()[pos * 2 + 0], 1.0f);
    EXPECT_FLOAT_EQ(dx.data<float>()[pos * 2 + 1], 2.0f);
    EXPECT_FLOAT_EQ(dx.data<float>()[8 + pos * 2 + 0], -1.0f);
    EXPECT_FLOAT_EQ(dx.data<float>()[8 + pos * 2 + 1], 0.25f);
  }
}

TEST(GlobalAvgPoolTest, GradientsMatchFiniteDifferences) {
  GlobalAvgPoolLayer a, b;
  testing::CheckLayerGradients(&a, {{3, 5, 4}}, 2);
  testing::CheckLayerGradients(&b, {{16, 16, 64}}, 3);  // large enough to go parallel
}

TEST(GlobalAvgPoolTest, RejectsNonImages) {
  v1::LayerSpec s;
  s.mutable_global_avg_pool();
  auto l = LayerRegistry::Global().Create(s);
  ASSERT_TRUE(l.ok());
  ParamSet p;
  auto r = (*l)->Build({{10}}, &p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("rank 3"), std::string::npos);
}

}  // namespace
}  // namespace yoke::engine
