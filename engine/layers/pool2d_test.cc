#include "engine/layers/pool2d.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/kernels/cpu/padding.h"
#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

struct Cfg {
  bool max;
  int64_t h, w, c, size, stride;
  bool same;
};

void Fill(const Tensor& t, uint64_t seed) { testing::FillUniform(t, seed, 3); }

// Naive pooling over the real (unpadded) inputs of each window, and its
// gradient: max routes dy to the (first) argmax, avg spreads dy / count.
void NaivePool(const Cfg& c, const Tensor& x, const Tensor& dy, std::vector<float>* y,
               std::vector<float>* dx) {
  cpu::Padding1d ph = cpu::ComputePadding(c.h, c.size, c.stride, c.same);
  cpu::Padding1d pw = cpu::ComputePadding(c.w, c.size, c.stride, c.same);
  const int64_t n = x.dim(0);
  y->assign(n * ph.out * pw.out * c.c, 0.0f);
  dx->assign(x.numel(), 0.0f);
  const float* xp = x.data<float>();
  const float* dyp = dy.data<float>();
  auto xi = [&](int64_t i, int64_t r, int64_t q, int64_t ch) {
    return ((i * c.h + r) * c.w + q) * c.c + ch;
  };
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < ph.out; ++r)
      for (int64_t q = 0; q < pw.out; ++q)
        for (int64_t ch = 0; ch < c.c; ++ch) {
          const int64_t o = ((i * ph.out + r) * pw.out + q) * c.c + ch;
          float best = -std::numeric_limits<float>::infinity();
          int64_t arg = -1, count = 0;
          double sum = 0;
          for (int64_t u = 0; u < c.size; ++u)
            for (int64_t v = 0; v < c.size; ++v) {
              int64_t yy = r * c.stride + u - ph.before, xx = q * c.stride + v - pw.before;
              if (yy < 0 || yy >= c.h || xx < 0 || xx >= c.w) continue;
              float val = xp[xi(i, yy, xx, ch)];
              if (val > best) best = val, arg = xi(i, yy, xx, ch);
              sum += val;
              ++count;
            }
          if (c.max) {
            (*y)[o] = best;
            (*dx)[arg] += dyp[o];
          } else {
            (*y)[o] = static_cast<float>(sum / count);
            for (int64_t u = 0; u < c.size; ++u)
              for (int64_t v = 0; v < c.size; ++v) {
                int64_t yy = r * c.stride + u - ph.before, xx = q * c.stride + v - pw.before;
                if (yy < 0 || yy >= c.h || xx < 0 || xx >= c.w) continue;
                (*dx)[xi(i, yy, xx, ch)] += dyp[o] / count;
              }
          }
        }
}

class Pool2dConfigTest : public ::testing::TestWithParam<Cfg> {};

TEST_P(Pool2dConfigTest, ForwardAndBackwardMatchNaive) {
  const Cfg c = GetParam();
  Pool2dLayer layer(c.max, c.size, c.stride, c.same);
  layer.set_name("pool");
  ParamSet p;
  auto shape = layer.Build({{c.h, c.w, c.c}}, &p);
  ASSERT_TRUE(shape.ok()) << shape.status();
  const int64_t n = 3;
  Tensor x = Tensor::Empty({n, c.h, c.w, c.c});
  Fill(x, 5);
  Tensor y = Tensor::Empty({n, (*shape)[0], (*shape)[1], c.c});
  Tensor dy = Tensor::Empty(y.shape());
  Fill(dy, 6);
  Tensor dx = Tensor::Empty(x.shape());
  for (int64_t i = 0; i < dx.numel(); ++i) dx.data<float>()[i] = 123.0f;  // overwritten
  ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
  ASSERT_TRUE(layer.Backward({&x}, y, dy, {&dx}, {}).ok());
  std::vector<float> ry, rdx;
  NaivePool(c, x, dy, &ry, &rdx);
  ASSERT_EQ(static_cast<int64_t>(ry.size()), y.numel());
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(y.data<float>()[i], ry[i], 1e-5) << i;
  for (int64_t i = 0; i < dx.numel(); ++i) {
    ASSERT_NEAR(dx.data<float>()[i], rdx[i], 1e-5) << i;
  }
}

TEST_P(Pool2dConfigTest, GradientsMatchFiniteDifferences) {
  const Cfg c = GetParam();
  Pool2dLayer layer(c.max, c.size, c.stride, c.same);
  layer.set_name("pool");
  testing::GradCheckOptions o;
  if (c.max) {
    // A spread-out input and a small step keep each window's winner fixed.
    o.input_lo = -10.0f;
    o.input_hi = 10.0f;
    o.step = 1e-3f;
  }
  testing::CheckLayerGradients(&layer, {{c.h, c.w, c.c}}, 2, o);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, Pool2dConfigTest,
    ::testing::Values(Cfg{true, 8, 8, 3, 2, 2, false},  // classic 2x2/2
                      Cfg{true, 7, 9, 2, 2, 2, false},  // odd: last row/column dropped
                      Cfg{true, 7, 9, 2, 3, 2, true},   // ResNet stem pool, same
                      Cfg{true, 6, 5, 4, 3, 1, true},   // overlapping, stride 1
                      Cfg{false, 8, 8, 3, 2, 2, false},
                      Cfg{false, 7, 9, 2, 3, 2, true},  // padding excluded from counts
                      Cfg{false, 5, 5, 3, 3, 1, true}, Cfg{false, 9, 7, 2, 3, 2, false},
                      // Large enough for the multi-threaded path.
                      Cfg{true, 28, 28, 32, 2, 2, false}, Cfg{false, 15, 15, 64, 3, 2, true}));

TEST(Pool2dTest, HandComputedMaxAndAvg) {
  // One 3x3 single-channel image, 2x2 window stride 2, same padding: output
  // 2x2, padding 1 after (bottom/right).
  float xv[] = {1, 5, 2, -3, 4, 0, 7, -1, 6};
  Tensor x = Tensor::Wrap(xv, {1, 3, 3, 1});
  Tensor y = Tensor::Empty({1, 2, 2, 1});
  Pool2dLayer mx(true, 2, 2, true), av(false, 2, 2, true);
  ParamSet p;
  ASSERT_EQ(*mx.Build({{3, 3, 1}}, &p), (Shape{2, 2, 1}));
  ASSERT_EQ(*av.Build({{3, 3, 1}}, &p), (Shape{2, 2, 1}));
  ASSERT_TRUE(mx.Forward({&x}, &y, {}).ok());
  float want_max[] = {5, 2, 7, 6};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], want_max[i]);
  ASSERT_TRUE(av.Forward({&x}, &y, {}).ok());
  float want_avg[] = {(1 + 5 - 3 + 4) / 4.0f, (2 + 0) / 2.0f, (7 - 1) / 2.0f, 6};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], want_avg[i]);
}

TEST(Pool2dTest, SpecDefaultsAndErrors) {
  v1::LayerSpec s;
  s.mutable_max_pool2d();
  auto l = LayerRegistry::Global().Create(s);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_STREQ((*l)->type(), "max_pool2d");
  ParamSet p;
  EXPECT_EQ(*(*l)->Build({{28, 28, 32}}, &p), (Shape{14, 14, 32}));  // size 2, stride 2
  s.mutable_avg_pool2d()->set_size(3);
  l = LayerRegistry::Global().Create(s);
  ASSERT_TRUE(l.ok());
  EXPECT_STREQ((*l)->type(), "avg_pool2d");
  EXPECT_EQ(*(*l)->Build({{9, 10, 4}}, &p), (Shape{3, 3, 4}));  // stride = size
  EXPECT_FALSE((*l)->Build({{2, 2, 4}}, &p).ok());              // window does not fit

  s.mutable_avg_pool2d()->set_padding("full");
  l = LayerRegistry::Global().Create(s);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("avg_pool2d.padding: unknown padding 'full'"),
            std::string::npos)
      << l.status();
  s.mutable_max_pool2d()->set_size(-2);
  l = LayerRegistry::Global().Create(s);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("max_pool2d.size"), std::string::npos);
}

}  // namespace
}  // namespace yoke::engine
