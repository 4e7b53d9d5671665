#include "engine/layers/conv2d.h"

#include <cmath>

#include "engine/kernels/cpu/padding.h"
#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

struct Cfg {
  int64_t h, w, c, k, kernel, stride;
  bool same, bias;
};

void Fill(const Tensor& t, uint64_t seed) { testing::FillUniform(t, seed, 7); }

// Direct convolution with explicit zero padding, written independently of the
// layer: x (N, H, W, C), w (K, kh, kw, C) -> y (N, OH, OW, K).
std::vector<double> NaiveConv(const Tensor& x, const Tensor& w, const float* b, const Cfg& c,
                              int64_t oh, int64_t ow, int64_t pad_t, int64_t pad_l) {
  const int64_t n = x.dim(0);
  std::vector<double> y(n * oh * ow * c.k);
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t q = 0; q < ow; ++q)
        for (int64_t k = 0; k < c.k; ++k) {
          double acc = b ? b[k] : 0.0;
          for (int64_t u = 0; u < c.kernel; ++u)
            for (int64_t v = 0; v < c.kernel; ++v) {
              int64_t yy = r * c.stride + u - pad_t, xx = q * c.stride + v - pad_l;
              if (yy < 0 || yy >= c.h || xx < 0 || xx >= c.w) continue;
              for (int64_t ch = 0; ch < c.c; ++ch) {
                acc += static_cast<double>(xp[((i * c.h + yy) * c.w + xx) * c.c + ch]) *
                       wp[((k * c.kernel + u) * c.kernel + v) * c.c + ch];
              }
            }
          y[((i * oh + r) * ow + q) * c.k + k] = acc;
        }
  return y;
}

TEST(Conv2dTest, OutputShapes) {
  ParamSet p;
  // same: ceil(H / stride)
  Conv2dLayer a(8, 3, 2, true, true);
  a.set_name("a");
  EXPECT_EQ(*a.Build({{9, 8, 3}}, &p), (Shape{5, 4, 8}));
  // valid: floor((H - k) / stride) + 1
  Conv2dLayer b(4, 3, 2, false, true);
  b.set_name("b");
  EXPECT_EQ(*b.Build({{9, 8, 3}}, &p), (Shape{4, 3, 4}));
  Conv2dLayer c(4, 5, 1, false, true);
  c.set_name("c");
  EXPECT_EQ(*c.Build({{28, 28, 1}}, &p), (Shape{24, 24, 4}));
  EXPECT_EQ(c.ForwardMacsPerExample(), 24 * 24 * 4 * 25);
  // TF's split: total padding 3 for 7 -> ceil(7/2)=4 with a 4x4 window... use 3x3/2 on 8:
  // out 4, total = 3*2 + 3 - 8 = 1 -> 0 before, 1 after.
  cpu::Padding1d pd = cpu::ComputePadding(8, 3, 2, true);
  EXPECT_EQ(pd.out, 4);
  EXPECT_EQ(pd.before, 0);
  EXPECT_EQ(pd.after, 1);
  pd = cpu::ComputePadding(224, 7, 2, true);  // ResNet stem: total 5 -> 2 + 3
  EXPECT_EQ(pd.out, 112);
  EXPECT_EQ(pd.before, 2);
  EXPECT_EQ(pd.after, 3);
}

class Conv2dConfigTest : public ::testing::TestWithParam<Cfg> {};

TEST_P(Conv2dConfigTest, ForwardMatchesNaiveConvolution) {
  const Cfg c = GetParam();
  Conv2dLayer layer(c.k, c.kernel, c.stride, c.same, c.bias);
  layer.set_name("conv");
  ParamSet p;
  auto shape = layer.Build({{c.h, c.w, c.c}}, &p);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_TRUE(p.Finalize().ok());
  p.Initialize(3);
  const int64_t n = 3;
  Tensor x = Tensor::Empty({n, c.h, c.w, c.c});
  Fill(x, 11);
  Tensor y = Tensor::Empty({n, (*shape)[0], (*shape)[1], c.k});
  ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
  cpu::Padding1d ph = cpu::ComputePadding(c.h, c.kernel, c.stride, c.same);
  cpu::Padding1d pw = cpu::ComputePadding(c.w, c.kernel, c.stride, c.same);
  ASSERT_EQ((*shape)[0], ph.out);
  ASSERT_EQ((*shape)[1], pw.out);
  std::vector<double> ref = NaiveConv(x, p.value(0), c.bias ? p.value(1).data<float>() : nullptr, c,
                                      ph.out, pw.out, ph.before, pw.before);
  for (int64_t i = 0; i < y.numel(); ++i) {
    ASSERT_NEAR(y.data<float>()[i], ref[i], 1e-4) << "at " << i;
  }
}

TEST_P(Conv2dConfigTest, GradientsMatchFiniteDifferences) {
  const Cfg c = GetParam();
  Conv2dLayer layer(c.k, c.kernel, c.stride, c.same, c.bias);
  layer.set_name("conv");
  testing::CheckLayerGradients(&layer, {{c.h, c.w, c.c}}, 2);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, Conv2dConfigTest,
    ::testing::Values(Cfg{7, 6, 3, 4, 3, 1, true, true},     // same, stride 1, odd
                      Cfg{9, 8, 3, 5, 3, 2, true, true},     // same, stride 2, odd H
                      Cfg{8, 9, 2, 3, 3, 2, false, true},    // valid, unused last rows
                      Cfg{10, 10, 1, 8, 5, 1, true, false},  // 5x5 same, 1 channel, no bias
                      Cfg{7, 7, 4, 6, 1, 2, true, false},    // 1x1 stride-2 projection
                      Cfg{11, 9, 3, 4, 7, 2, true, true},    // 7x7/2 stem-like
                      Cfg{6, 6, 16, 16, 3, 1, false, true},  // wider channels
                      // One input channel and K % 16 == 0: the direct kernels
                      // of conv_c1.h on a CPU with AVX-512.
                      Cfg{10, 9, 1, 16, 5, 1, true, true}, Cfg{7, 12, 1, 32, 3, 1, false, false}));

TEST(Conv2dTest, BatchSizeChangesAndFirstLayerBackward) {
  const Cfg c{6, 5, 3, 4, 3, 1, true, true};
  Conv2dLayer layer(c.k, c.kernel, c.stride, c.same, c.bias);
  layer.set_name("conv");
  ParamSet p;
  ASSERT_TRUE(layer.Build({{c.h, c.w, c.c}}, &p).ok());
  EXPECT_TRUE(p.Finalize().ok());
  p.Initialize(5);
  for (int64_t n : {2, 5, 2}) {
    Tensor x = Tensor::Empty({n, c.h, c.w, c.c});
    Fill(x, 20 + n);
    Tensor y = Tensor::Empty({n, c.h, c.w, c.k});
    ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
    std::vector<double> ref = NaiveConv(x, p.value(0), p.value(1).data<float>(), c, c.h, c.w, 1, 1);
    for (int64_t i = 0; i < y.numel(); ++i) ASSERT_NEAR(y.data<float>()[i], ref[i], 1e-4);
  }
  // The same weight gradients with and without dx (first-layer path).
  const int64_t n = 2;
  Tensor x = Tensor::Empty({n, c.h, c.w, c.c}), y = Tensor::Empty({n, c.h, c.w, c.k});
  Tensor dy = Tensor::Empty(y.shape()), dx = Tensor::Empty(x.shape());
  Fill(x, 1);
  Fill(dy, 2);
  ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
  ASSERT_TRUE(layer.Backward({&x}, y, dy, {nullptr}, {}).ok());
  std::vector<float> g0(p.flat_grads().data<float>(),
                        p.flat_grads().data<float>() + p.flat_grads().numel());
  p.flat_grads().SetZero();
  ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
  ASSERT_TRUE(layer.Backward({&x}, y, dy, {&dx}, {}).ok());
  for (size_t i = 0; i < g0.size(); ++i) {
    ASSERT_FLOAT_EQ(g0[i], p.flat_grads().data<float>()[i]) << i;
  }
  // db = sum of dy over (N, H, W).
  for (int64_t k = 0; k < c.k; ++k) {
    double s = 0;
    for (int64_t i = 0; i < dy.numel() / c.k; ++i) s += dy.data<float>()[i * c.k + k];
    EXPECT_NEAR(p.grad(1).data<float>()[k], s, 1e-4);
  }
}

TEST(Conv2dTest, RejectsBadSpecsAndShapes) {
  auto make = [](int filters, int kernel, int stride, const std::string& pad) {
    v1::LayerSpec s;
    auto* c = s.mutable_conv2d();
    c->set_filters(filters);
    c->set_kernel(kernel);
    c->set_stride(stride);
    c->set_padding(pad);
    return LayerRegistry::Global().Create(s);
  };
  auto expect = [](const absl::StatusOr<std::unique_ptr<Layer>>& r, const std::string& needle) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  expect(make(8, 0, 1, "same"), "conv2d.kernel: must be > 0, got 0");
  expect(make(8, -1, 1, "same"), "conv2d.kernel: must be > 0, got -1");
  expect(make(0, 3, 1, "same"), "conv2d.filters");
  expect(make(8, 3, -2, "same"), "conv2d.stride");
  expect(make(8, 3, 1, "full"), "conv2d.padding: unknown padding 'full' (known: same, valid)");
  auto ok = make(8, 3, 0, "");  // defaults: stride 1, same
  ASSERT_TRUE(ok.ok());
  ParamSet p;
  (*ok)->set_name("c");
  EXPECT_EQ(*(*ok)->Build({{5, 5, 2}}, &p), (Shape{5, 5, 8}));
  EXPECT_FALSE((*ok)->Build({{5, 5}}, &p).ok());
  auto valid = make(8, 7, 1, "valid");
  ASSERT_TRUE(valid.ok());
  auto s = (*valid)->Build({{5, 5, 2}}, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("does not fit"), std::string::npos);
}

}  // namespace
}  // namespace yoke::engine
