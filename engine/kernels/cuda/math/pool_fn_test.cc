// The pooling functors (pool.h, pool_geom.h) against the CPU Pool2dLayer:
// the same window order, tie rule and rounding, so forward and backward
// equal the CPU's bit for bit, over valid and asymmetric "same" padding,
// overlapping and leftover windows, batch 1 and 3, C 1 and 3, and inputs
// full of ties (a few values only) so that the winner rule is exercised.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda/math/functor_test_util.h"
#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/kernels/cuda/math/pool.h"
#include "engine/kernels/cuda/math/pool_geom.h"
#include "engine/layers/pool2d.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

struct Case {
  int64_t n, h, w, c, size, stride;
  bool same;
};

// Values on a grid of 0.5 in [-2, 2): many ties inside each window.
std::vector<float> TiedInput(int64_t count, bool with_nan) {
  std::vector<float> x = testing::Random(count, 5, -2.0f, 2.0f);
  for (float& v : x) v = std::floor(v * 2.0f) / 2.0f;
  if (with_nan) {
    for (size_t i = 7; i < x.size(); i += 29) x[i] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

void Check(const Case& k, bool max, bool with_nan) {
  SCOPED_TRACE(absl::StrCat(max ? "max" : "avg", " x(", k.n, ",", k.h, ",", k.w, ",", k.c,
                            ") size ", k.size, " stride ", k.stride, k.same ? " same" : " valid",
                            with_nan ? " nan" : ""));
  const Shape in{k.h, k.w, k.c};
  ASSERT_FALSE(PoolHasEmptyWindow(in, k.size, k.stride, k.same));
  const PoolGeom g = MakePoolGeom(in, k.n, k.size, k.stride, k.same);
  const int64_t nx = k.n * k.h * k.w * k.c, ny = k.n * g.oh * g.ow * k.c;
  std::vector<float> x = max ? TiedInput(nx, with_nan) : testing::Random(nx, 6);
  std::vector<float> dy = testing::Random(ny, 7);
  Pool2dLayer cpu(max, k.size, k.stride, k.same);
  const testing::CpuRun want = testing::RunCpuLayer(cpu, in, x, dy);
  ASSERT_EQ(static_cast<int64_t>(want.y.size()), ny);

  std::vector<float> y(ny, -7.0f), dx(nx, -7.0f);
  std::vector<int32_t> argmax(ny, -1);
  if (max) {
    HostForEach(ny, MaxPoolForwardFn{g, x.data(), y.data(), argmax.data()});
    HostForEach(nx, MaxPoolBackwardFn{g, argmax.data(), dy.data(), dx.data()});
  } else {
    HostForEach(ny, AvgPoolForwardFn{g, x.data(), y.data()});
    HostForEach(nx, AvgPoolBackwardFn{g, dy.data(), dx.data()});
  }
  testing::ExpectBitwise(y, want.y, "forward");
  testing::ExpectBitwise(dx, want.dx, "backward");
}

const Case kCases[] = {
    {1, 4, 4, 1, 2, 2, false},  // tiled 2x2
    {3, 4, 6, 3, 2, 2, false},  // tiled, non-square
    {3, 5, 7, 3, 2, 2, false},  // leftover row and column (dx 0 there)
    {3, 5, 7, 3, 3, 3, false},  // leftover, 3x3
    {1, 4, 6, 3, 3, 2, true},   // "same" with asymmetric padding (0 before, 1 after)
    {3, 5, 5, 1, 3, 2, true},   // "same", symmetric padding
    {3, 6, 5, 3, 3, 1, true},   // "same", stride 1, heavy overlap
    {1, 5, 4, 3, 2, 1, true},   // "same", even window: padding after only
    {3, 7, 5, 3, 3, 2, false},  // overlapping valid windows
    {3, 3, 3, 3, 1, 1, false},  // 1x1 window
    {1, 3, 5, 3, 4, 3, true},   // window larger than stride, "same", asymmetric
};

TEST(PoolFnTest, MaxPoolMatchesCpuBitwiseWithTies) {
  for (const Case& k : kCases) Check(k, true, false);
}

TEST(PoolFnTest, MaxPoolKeepsTheCpusWinnerAroundNans) {
  for (const Case& k : kCases) Check(k, true, true);
}

TEST(PoolFnTest, AvgPoolMatchesCpuBitwise) {
  for (const Case& k : kCases) Check(k, false, false);
}

// The covering range is exactly the outputs whose windows hold the input.
TEST(PoolFnTest, CoveringInvertsWindow) {
  for (const Case& k : kCases) {
    const PoolGeom g = MakePoolGeom({k.h, k.w, k.c}, 1, k.size, k.stride, k.same);
    for (int64_t u = 0; u < g.h; ++u) {
      int64_t lo, hi;
      PoolCovering(u, g.sh, g.pad_top, g.kh, g.oh, &lo, &hi);
      for (int64_t r = 0; r < g.oh; ++r) {
        int64_t a, b;
        PoolWindow(r, g.sh, g.pad_top, g.kh, g.h, &a, &b);
        EXPECT_EQ(r >= lo && r < hi, u >= a && u < b) << "u " << u << " r " << r;
      }
    }
  }
}

}  // namespace
}  // namespace yoke::engine::cuda
