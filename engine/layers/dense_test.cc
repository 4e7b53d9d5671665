#include "engine/layers/dense.h"

#include <cmath>

#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

TEST(DenseTest, GradientsMatchFiniteDifferences) {
  DenseLayer layer(7, true);
  layer.set_name("d");
  testing::CheckLayerGradients(&layer, {{5}}, 3);
}

// 256 units at batch 3: dx goes through the transposed product (dense.cc).
TEST(DenseTest, GradientsMatchFiniteDifferencesOnTheTransposedBackwardPath) {
  DenseLayer layer(256, true);
  layer.set_name("d");
  testing::CheckLayerGradients(&layer, {{6}}, 3);
}

// The transposed path keeps a oneDNN plan per batch size; a step with a
// short batch between two full ones must use the right one each time.
TEST(DenseTest, BackwardDataIsRightWhenTheBatchSizeChangesBetweenSteps) {
  const int64_t d = 6, u = 256;
  DenseLayer layer(u, true);
  layer.set_name("d");
  ParamSet p;
  ASSERT_TRUE(layer.Build({{d}}, &p).ok());
  ASSERT_TRUE(p.Finalize().ok());
  float* w = p.value(0).data<float>();
  for (int64_t i = 0; i < d * u; ++i) w[i] = std::sin(0.1f * static_cast<float>(i));
  for (int64_t n : {8, 3, 8, 5}) {
    Tensor x = Tensor::Empty({n, d}), y = Tensor::Empty({n, u});
    Tensor dy = Tensor::Empty({n, u}), dx = Tensor::Empty({n, d});
    for (int64_t i = 0; i < n * d; ++i) x.data<float>()[i] = 0.01f * static_cast<float>(i);
    for (int64_t i = 0; i < n * u; ++i) {
      dy.data<float>()[i] = std::cos(0.07f * static_cast<float>(i + n));
    }
    ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
    ASSERT_TRUE(layer.Backward({&x}, y, dy, {&dx}, {}).ok());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < d; ++j) {
        double s = 0.0;  // dx[i][j] = sum_k dy[i][k] W[j][k]
        for (int64_t k = 0; k < u; ++k) {
          s += static_cast<double>(dy.data<float>()[i * u + k]) * w[j * u + k];
        }
        ASSERT_NEAR(dx.data<float>()[i * d + j], s, 1e-4)
            << "batch " << n << " [" << i << "][" << j << "]";
      }
    }
  }
}

TEST(DenseTest, ForwardMatchesHandComputed) {
  DenseLayer layer(2, true);
  layer.set_name("d");
  ParamSet p;
  ASSERT_TRUE(layer.Build({{3}}, &p).ok());
  EXPECT_TRUE(p.Finalize().ok());
  // W (3, 2) row-major, b (2)
  float w[] = {1, 2, 3, 4, 5, 6}, b[] = {0.5f, -1};
  std::copy(w, w + 6, p.value(0).data<float>());
  std::copy(b, b + 2, p.value(1).data<float>());
  float x[] = {1, 0, -1, 2, 1, 0};
  Tensor xt = Tensor::Wrap(x, {2, 3});
  Tensor y = Tensor::Empty({2, 2});
  ASSERT_TRUE(layer.Forward({&xt}, &y, {}).ok());
  // row0: [1*1+0*3-1*5, 1*2+0*4-1*6] + b = [-4+0.5, -4-1]
  EXPECT_FLOAT_EQ(y.data<float>()[0], -3.5f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], -5.0f);
  // row1: [2*1+1*3, 2*2+1*4] + b = [5.5, 7]
  EXPECT_FLOAT_EQ(y.data<float>()[2], 5.5f);
  EXPECT_FLOAT_EQ(y.data<float>()[3], 7.0f);
}

TEST(DenseTest, RejectsBadSpecAndShapes) {
  v1::LayerSpec spec;
  spec.mutable_dense()->set_units(-1);
  auto l = LayerRegistry::Global().Create(spec);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("dense.units"), std::string::npos);
  DenseLayer layer(4, true);
  ParamSet p;
  auto s = layer.Build({{2, 2, 1}}, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("flatten"), std::string::npos);
}

}  // namespace
}  // namespace yoke::engine
