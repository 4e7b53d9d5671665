// Explicit padding (math/conv_pad.h, SymmetricOnPaddedInput) against the
// asymmetric convolution it replaces: for TensorFlow "same" geometries, a
// reference convolution with the original, unequal paddings equals the same
// reference on the padded input with equal paddings (forward, and
// backward-weights), and backward-data equals the cropped padded result,
// value for value. The functors run on the host (HostForEach), as the
// device runs them. No device needed.
#include <string>
#include <vector>

#include "engine/kernels/cuda/conv_graph.h"
#include "engine/kernels/cuda/math/conv_pad.h"
#include "engine/kernels/cuda/math/host_for_each.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>(seed >> 8) / 16777216.0f - 0.5f;
  }
  return v;
}

// The input element a window position reads, or -1 outside the input.
int64_t At(const ConvGeometry& g, int64_t n, int64_t oh, int64_t ow, int64_t i, int64_t j,
           int64_t c) {
  const int64_t h = oh * g.stride_h - g.pad_top + i, w = ow * g.stride_w - g.pad_left + j;
  if (h < 0 || h >= g.h || w < 0 || w >= g.w) return -1;
  return ((n * g.h + h) * g.w + w) * g.c + c;
}

// One loop nest for all three passes, in one order, so the sums of two
// geometries that read the same elements are the same sums.
void Reference(const ConvGeometry& g, const float* x, const float* wt, const float* dy, float* y,
               float* dx, float* dw) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oh = 0; oh < g.oh; ++oh)
      for (int64_t ow = 0; ow < g.ow; ++ow)
        for (int64_t k = 0; k < g.k; ++k) {
          const int64_t yi = ((n * g.oh + oh) * g.ow + ow) * g.k + k;
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j)
              for (int64_t c = 0; c < g.c; ++c) {
                const int64_t xi = At(g, n, oh, ow, i, j, c);
                if (xi < 0) continue;
                const int64_t wi = ((k * g.kh + i) * g.kw + j) * g.c + c;
                y[yi] += x[xi] * wt[wi];
                dx[xi] += dy[yi] * wt[wi];
                dw[wi] += x[xi] * dy[yi];
              }
        }
}

struct Case {
  int filters, kernel, stride;
  std::vector<int64_t> input;  // (H, W, C)
  int64_t n;
};

class ConvPadTest : public ::testing::TestWithParam<Case> {};

TEST_P(ConvPadTest, PaddedSymmetricEqualsAsymmetric) {
  const Case& c = GetParam();
  v1::Conv2dSpec spec;
  spec.set_filters(c.filters);
  spec.set_kernel(c.kernel);
  spec.set_stride(c.stride);
  auto geom = GeometryForConv2d(spec, c.input, c.n);
  ASSERT_TRUE(geom.ok()) << geom.status();
  const ConvGeometry g = *geom;
  ASSERT_TRUE(Asymmetric(g)) << "pads " << g.pad_top << "/" << g.pad_bottom;
  const ConvGeometry s = SymmetricOnPaddedInput(g);
  EXPECT_FALSE(Asymmetric(s));
  EXPECT_EQ(s.oh, g.oh);
  EXPECT_EQ(s.ow, g.ow);
  // What cuDNN computes for the output size from the padded geometry.
  EXPECT_EQ((s.h + 2 * s.pad_top - s.kh) / s.stride_h + 1, g.oh);
  EXPECT_EQ((s.w + 2 * s.pad_left - s.kw) / s.stride_w + 1, g.ow);

  const int64_t nx = g.n * g.h * g.w * g.c, nxp = s.n * s.h * s.w * s.c;
  const int64_t ny = g.n * g.oh * g.ow * g.k, nw = g.k * g.kh * g.kw * g.c;
  const std::vector<float> x = Random(nx, 1), wt = Random(nw, 2), dy = Random(ny, 3);
  std::vector<float> y(ny), dx(nx), dw(nw);
  Reference(g, x.data(), wt.data(), dy.data(), y.data(), dx.data(), dw.data());

  std::vector<float> xp(nxp, 7.0f);  // every element must be written
  HostForEach(nxp, PadBottomRightFn{x.data(), xp.data(), g.h, g.w, g.c, s.h, s.w});
  std::vector<float> yp(ny), dxp(nxp), dwp(nw), dxc(nx, 7.0f);
  Reference(s, xp.data(), wt.data(), dy.data(), yp.data(), dxp.data(), dwp.data());
  HostForEach(nx, CropBottomRightFn{dxp.data(), dxc.data(), g.h, g.w, g.c, s.h, s.w});

  for (int64_t i = 0; i < ny; ++i) ASSERT_EQ(yp[i], y[i]) << "y " << i;
  for (int64_t i = 0; i < nx; ++i) ASSERT_EQ(dxc[i], dx[i]) << "dx " << i;
  for (int64_t i = 0; i < nw; ++i) ASSERT_EQ(dwp[i], dw[i]) << "dW " << i;
  // The added rows and columns are zeros.
  for (int64_t i = 0; i < nxp; ++i) {
    const int64_t col = (i / s.c) % s.w, row = (i / (s.c * s.w)) % s.h;
    if (row >= g.h || col >= g.w) {
      ASSERT_EQ(xp[i], 0.0f) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SamePadding, ConvPadTest,
                         ::testing::Values(Case{4, 3, 2, {8, 8, 3}, 2},     // 0/1 on both axes
                                           Case{6, 3, 2, {9, 8, 4}, 1},     // 1/1 on H, 0/1 on W
                                           Case{8, 7, 2, {15, 16, 3}, 2},   // the stem: 2/3 or 3/3
                                           Case{2, 4, 2, {6, 5, 1}, 3},     // an even kernel
                                           Case{3, 2, 1, {5, 4, 2}, 2},     // stride 1, 0/1
                                           Case{5, 3, 2, {56, 56, 2}, 1}),  // ResNet's 3x3/2 on 56
                         [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace yoke::engine::cuda
