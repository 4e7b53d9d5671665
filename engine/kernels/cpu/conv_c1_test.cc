#include "engine/kernels/cpu/conv_c1.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/pool.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine::cpu {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed) { return testing::UniformVector(n, seed, 3); }

struct Case {
  int64_t n, h, w, k, window, pad_top, pad_left, pad_bottom, pad_right;
  bool bias, relu;
};

Conv2dGeometry Geometry(const Case& c) {
  Conv2dGeometry g;
  g.n = c.n;
  g.h = c.h;
  g.w = c.w;
  g.c = 1;
  g.k = c.k;
  g.kh = g.kw = c.window;
  g.pad_top = c.pad_top;
  g.pad_left = c.pad_left;
  g.pad_bottom = c.pad_bottom;
  g.pad_right = c.pad_right;
  g.oh = c.h + c.pad_top + c.pad_bottom - c.window + 1;
  g.ow = c.w + c.pad_left + c.pad_right - c.window + 1;
  g.bias = c.bias;
  g.relu = c.relu;
  return g;
}

// Largest |a - b| relative to the largest |b|; infinite when a holds a
// non-finite value (an output never written stays NaN).
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

// dw (K, KH, KW) and then db (K) in double, straight from the definition,
// with the sum of the terms' magnitudes for each (the scale of a float
// sum's rounding error).
void ReferenceGradients(const Conv2dGeometry& g, const std::vector<float>& x,
                        const std::vector<float>& dy, std::vector<double>* grad,
                        std::vector<double>* magnitude) {
  const int64_t taps = g.kh * g.kw;
  grad->assign(g.k * (taps + 1), 0.0);
  magnitude->assign(grad->size(), 0.0);
  for (int64_t i = 0; i < g.n; ++i)
    for (int64_t r = 0; r < g.oh; ++r)
      for (int64_t q = 0; q < g.ow; ++q)
        for (int64_t f = 0; f < g.k; ++f) {
          const double d = dy[((i * g.oh + r) * g.ow + q) * g.k + f];
          (*grad)[g.k * taps + f] += d;
          (*magnitude)[g.k * taps + f] += std::fabs(d);
          for (int64_t u = 0; u < g.kh; ++u)
            for (int64_t v = 0; v < g.kw; ++v) {
              const int64_t row = r + u - g.pad_top, col = q + v - g.pad_left;
              if (row < 0 || row >= g.h || col < 0 || col >= g.w) continue;
              const double t = d * x[(i * g.h + row) * g.w + col];
              (*grad)[f * taps + u * g.kw + v] += t;
              (*magnitude)[f * taps + u * g.kw + v] += std::fabs(t);
            }
        }
}

class SingleChannelConvTest : public ::testing::TestWithParam<Case> {};

// The direct kernels against oneDNN's on the same geometry: the forward
// (with its fused ReLU and bias) and both weight gradients.
TEST_P(SingleChannelConvTest, MatchesOneDnn) {
  const Case c = GetParam();
  const Conv2dGeometry g = Geometry(c);
  auto own = Conv2dPlan::Create(g, false, true);
  auto dnnl = Conv2dPlan::Create(g, false, false);
  ASSERT_TRUE(own.ok()) << own.status();
  ASSERT_TRUE(dnnl.ok()) << dnnl.status();
  ASSERT_FALSE((*dnnl)->uses_own_kernels());
  if (!(*own)->uses_own_kernels()) {
    GTEST_SKIP() << "this CPU has no AVX-512F: the direct kernels do not run";
  }
  const std::vector<float> x = Random(g.n * g.h * g.w, 1);
  const std::vector<float> w = Random(g.k * g.kh * g.kw, 2);
  const std::vector<float> b = Random(g.k, 3);
  const std::vector<float> dy = Random(g.n * g.oh * g.ow * g.k, 4);
  const size_t ny = static_cast<size_t>(g.n * g.oh * g.ow * g.k);
  std::vector<float> y_own(ny, NAN), y_dnnl(ny, NAN);
  ASSERT_TRUE((*own)->Forward(x.data(), w.data(), b.data(), y_own.data()).ok());
  ASSERT_TRUE((*dnnl)->Forward(x.data(), w.data(), b.data(), y_dnnl.data()).ok());
  EXPECT_LT(RelativeError(y_own, y_dnnl), 1e-5);
  if (c.relu) {
    int zeros = 0;
    for (float v : y_own) {
      ASSERT_GE(v, 0.0f);
      zeros += v == 0.0f;
    }
    EXPECT_GT(zeros, 0) << "the case should clip some outputs";
  }
  std::vector<float> dw_own(w.size(), NAN), dw_dnnl(w.size(), NAN);
  std::vector<float> db_own(b.size(), NAN), db_dnnl(b.size(), NAN);
  ASSERT_TRUE((*own)->BackwardWeights(x.data(), dy.data(), dw_own.data(), db_own.data()).ok());
  ASSERT_TRUE((*dnnl)->BackwardWeights(x.data(), dy.data(), dw_dnnl.data(), db_dnnl.data()).ok());
  std::vector<double> ref, magnitude;
  ReferenceGradients(g, x, dy, &ref, &magnitude);
  const int64_t taps = g.kh * g.kw;
  for (int64_t e = 0; e < static_cast<int64_t>(ref.size()); ++e) {
    const bool is_bias = e >= g.k * taps;
    if (is_bias && !c.bias) continue;
    const float own_v = is_bias ? db_own[e - g.k * taps] : dw_own[e];
    const float dnnl_v = is_bias ? db_dnnl[e - g.k * taps] : dw_dnnl[e];
    const double tol = 1e-5 * magnitude[e] + 1e-6;
    ASSERT_NEAR(own_v, ref[e], tol) << (is_bias ? "db " : "dw ") << e;
    ASSERT_NEAR(dnnl_v, ref[e], tol) << "oneDNN itself, element " << e;
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, SingleChannelConvTest,
                         ::testing::Values(
                             // The zoo CNN's first layer: 5x5 "same", 32 filters, ReLU fused.
                             Case{64, 28, 28, 32, 5, 2, 2, 2, 2, true, true},
                             // Rows of 27 outputs: blocks of 14, 8, 4 and 1 pixels.
                             Case{3, 17, 27, 16, 3, 1, 1, 1, 1, true, false},
                             // Unequal padding, no bias, 48 filters, a batch of one; rows of 11
                             // outputs: blocks of 8, 2 and 1.
                             Case{1, 9, 11, 48, 5, 0, 3, 2, 1, false, true},
                             // No padding ("valid"); rows of 18: blocks of 14 and 4.
                             Case{5, 12, 20, 16, 3, 0, 0, 0, 0, true, true}));

// Backward-weights sums the images' partials in a fixed order, so the
// gradient is the same bits on one thread and on several.
TEST(SingleChannelConvDeterminism, WeightGradientDoesNotDependOnThreads) {
  const Conv2dGeometry g = Geometry(Case{13, 28, 28, 32, 5, 2, 2, 2, 2, true, false});
  const std::vector<float> x = Random(g.n * g.h * g.w, 5);
  const std::vector<float> dy = Random(g.n * g.oh * g.ow * g.k, 6);
  std::vector<std::vector<float>> dws;
  const int before = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    auto plan = Conv2dPlan::Create(g, false, true);
    ASSERT_TRUE(plan.ok()) << plan.status();
    if (!(*plan)->uses_own_kernels()) {
      omp_set_num_threads(before);
      GTEST_SKIP() << "this CPU has no AVX-512F: the direct kernels do not run";
    }
    std::vector<float> dw(g.k * 25), db(g.k);
    ASSERT_TRUE((*plan)->BackwardWeights(x.data(), dy.data(), dw.data(), db.data()).ok());
    dw.insert(dw.end(), db.begin(), db.end());
    dws.push_back(dw);
  }
  omp_set_num_threads(before);
  for (size_t t = 1; t < dws.size(); ++t) {
    for (size_t i = 0; i < dws[0].size(); ++i) {
      ASSERT_EQ(dws[0][i], dws[t][i]) << "threads variant " << t << " element " << i;
    }
  }
}

// The fused pool (Conv2dGeometry::pool) against the layers it replaces: the
// direct kernels' ReLU'd output, Pool2dPlan's 2x2 max pool, its backward
// through the ReLU, and the direct backward-weights of the full-size
// gradient. Both must give the same bits. `ties`: zero weights and a positive
// bias, so every window's four inputs are equal and the first must win.
struct PooledCase {
  Case conv;
  bool ties;
};

class PooledConvTest : public ::testing::TestWithParam<PooledCase> {};

TEST_P(PooledConvTest, EqualsConvThenPoolBitForBit) {
  const PooledCase pc = GetParam();
  const Conv2dGeometry g = Geometry(pc.conv);
  Conv2dGeometry pooled_g = g;
  pooled_g.pool = true;
  if (!SingleChannelConv::Supported(pooled_g)) {
    GTEST_SKIP() << "this CPU has no AVX-512F: the direct kernels do not run";
  }
  auto fused = Conv2dPlan::Create(pooled_g, false, true);
  auto conv = Conv2dPlan::Create(g, false, true);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_TRUE(conv.ok()) << conv.status();
  Pool2dGeometry pg;
  pg.n = g.n;
  pg.h = g.oh;
  pg.w = g.ow;
  pg.c = g.k;
  pg.oh = g.oh / 2;
  pg.ow = g.ow / 2;
  auto pool = Pool2dPlan::Create(pg);
  ASSERT_TRUE(pool.ok()) << pool.status();

  const std::vector<float> x = Random(g.n * g.h * g.w, 7);
  std::vector<float> w = Random(g.k * g.kh * g.kw, 8);
  std::vector<float> b = Random(g.k, 9);
  if (pc.ties) {
    std::fill(w.begin(), w.end(), 0.0f);
    std::fill(b.begin(), b.end(), 0.5f);
  }
  const int64_t full = g.n * g.oh * g.ow * g.k, pooled = g.n * pg.oh * pg.ow * g.k;
  const std::vector<float> dy = Random(pooled, 10);

  std::vector<float> y_full(full, NAN), y_ref(pooled, NAN), y(pooled, NAN);
  ASSERT_TRUE((*conv)->Forward(x.data(), w.data(), b.data(), y_full.data()).ok());
  ASSERT_TRUE((*pool)->Forward(y_full.data(), y_ref.data()).ok());
  ASSERT_TRUE((*fused)->Forward(x.data(), w.data(), b.data(), y.data()).ok());
  for (int64_t i = 0; i < pooled; ++i) ASSERT_EQ(y[i], y_ref[i]) << "pooled output " << i;

  std::vector<float> dy_full(full, NAN);
  ASSERT_TRUE(
      (*pool)->BackwardThroughRelu(y_full.data(), y_ref.data(), dy.data(), dy_full.data()).ok());
  const size_t nw = w.size();
  std::vector<float> dw_ref(nw, NAN), db_ref(g.k, NAN), dw(nw, NAN), db(g.k, NAN);
  ASSERT_TRUE(
      (*conv)->BackwardWeights(x.data(), dy_full.data(), dw_ref.data(), db_ref.data()).ok());
  ASSERT_TRUE((*fused)->BackwardWeights(x.data(), dy.data(), dw.data(), db.data()).ok());
  for (size_t i = 0; i < nw; ++i) ASSERT_EQ(dw[i], dw_ref[i]) << "dw " << i;
  if (g.bias) {
    for (int64_t i = 0; i < g.k; ++i) ASSERT_EQ(db[i], db_ref[i]) << "db " << i;
  }
  // Not vacuous: some gradient flowed, and (but for ties) the ReLU clipped
  // some windows.
  double norm = 0;
  for (float v : dw_ref) norm += std::fabs(v);
  EXPECT_GT(norm, 0.0);
  if (!pc.ties) {
    EXPECT_NE(std::count(y.begin(), y.end(), 0.0f), 0) << "no window was clipped";
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, PooledConvTest,
                         ::testing::Values(
                             // The zoo CNN's first layer and pool.
                             PooledCase{Case{8, 28, 28, 32, 5, 2, 2, 2, 2, true, true}, false},
                             // 17 x 27 outputs: an odd row and column no window reads; pooled
                             // rows of 13 windows run blocks of 14, 8 and 4 outputs.
                             PooledCase{Case{3, 17, 27, 16, 3, 1, 1, 1, 1, true, true}, false},
                             // 11 wide: blocks of 8 and 2; no bias; 48 filters; unequal padding.
                             PooledCase{Case{2, 9, 11, 48, 5, 0, 3, 2, 1, false, true}, false},
                             // 7 wide ("valid", 9 - 3 + 1): blocks of 4 and 2; 18 rows for 14.
                             PooledCase{Case{2, 14, 9, 16, 3, 0, 0, 0, 0, true, true}, false},
                             // Every window tied: the first input must win, as Pool2dPlan's.
                             PooledCase{Case{2, 10, 10, 16, 3, 1, 1, 1, 1, true, true}, true}));

TEST(SingleChannelConvSupport, PoolNeedsTheReluTheKernelsAndNoBackwardData) {
  Conv2dGeometry g = Geometry(Case{2, 8, 8, 16, 3, 1, 1, 1, 1, true, true});
  g.pool = true;
  if (!SingleChannelConv::Supported(g)) {
    GTEST_SKIP() << "this CPU has no AVX-512F: the direct kernels do not run";
  }
  auto with_dx = Conv2dPlan::Create(g, true, true);
  EXPECT_EQ(with_dx.status().code(), absl::StatusCode::kInvalidArgument);
  auto dnnl = Conv2dPlan::Create(g, false, false);
  EXPECT_EQ(dnnl.status().code(), absl::StatusCode::kInvalidArgument);
  Conv2dGeometry no_relu = g;
  no_relu.relu = false;
  EXPECT_FALSE(SingleChannelConv::Supported(no_relu));
  EXPECT_FALSE(Conv2dPlan::Create(no_relu, false, true).ok());
  Conv2dGeometry one_row = g;
  one_row.oh = 1;
  EXPECT_FALSE(SingleChannelConv::Supported(one_row));
  auto plan = Conv2dPlan::Create(g, false, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<float> dy(g.n * 4 * 4 * g.k), w(g.k * 9), dx(g.n * g.h * g.w);
  EXPECT_EQ((*plan)->BackwardData(dy.data(), w.data(), dx.data()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(SingleChannelConvSupport, TakesOnlyItsShapes) {
  Conv2dGeometry g = Geometry(Case{2, 8, 8, 16, 3, 1, 1, 1, 1, true, false});
  const bool avx512 = __builtin_cpu_supports("avx512f");
  EXPECT_EQ(SingleChannelConv::Supported(g), avx512);
  Conv2dGeometry two_channels = g;
  two_channels.c = 2;
  EXPECT_FALSE(SingleChannelConv::Supported(two_channels));
  Conv2dGeometry k8 = g;
  k8.k = 8;
  EXPECT_FALSE(SingleChannelConv::Supported(k8));
  Conv2dGeometry strided = g;
  strided.stride_h = strided.stride_w = 2;
  EXPECT_FALSE(SingleChannelConv::Supported(strided));
  Conv2dGeometry seven = g;
  seven.kh = seven.kw = 7;
  EXPECT_FALSE(SingleChannelConv::Supported(seven));
}

}  // namespace
}  // namespace yoke::engine::cpu
