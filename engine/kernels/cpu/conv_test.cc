// Conv2dPlan through oneDNN against a direct reference, for the geometries
// of a narrow ResNet-18 at 64x64 (8 to 64 channels, batch 1 and 16), with
// guard bands around every buffer: the results must match and nothing may
// be written outside the buffers the caller passed. Each geometry runs
// several steps, with heap traffic between them, so a kernel that corrupts
// the heap is caught here and not in a later, unrelated test.
#include "engine/kernels/cpu/conv.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace yoke::engine::cpu {
namespace {

constexpr int64_t kGuard = 256;
constexpr float kSentinel = -12345.5f;

// A buffer of n floats with kGuard sentinels on each side.
struct Guarded {
  explicit Guarded(int64_t n) : v(n + 2 * kGuard, kSentinel), n(n) {}
  float* data() { return v.data() + kGuard; }
  const float* data() const { return v.data() + kGuard; }
  // The sentinels that were overwritten.
  int64_t Trampled() const {
    int64_t bad = 0;
    for (int64_t i = 0; i < kGuard; ++i) {
      bad += v[i] != kSentinel;
      bad += v[kGuard + n + i] != kSentinel;
    }
    return bad;
  }
  std::vector<float> v;
  int64_t n;
};

Conv2dGeometry Geometry(int64_t n, int64_t hw, int64_t c, int64_t k, int64_t kernel, int64_t stride,
                        int64_t pad_before, int64_t pad_after) {
  Conv2dGeometry g;
  g.n = n;
  g.h = g.w = hw;
  g.c = c;
  g.k = k;
  g.kh = g.kw = kernel;
  g.stride_h = g.stride_w = stride;
  g.pad_top = g.pad_left = pad_before;
  g.pad_bottom = g.pad_right = pad_after;
  g.oh = g.ow = (hw + pad_before + pad_after - kernel) / stride + 1;
  g.bias = false;
  return g;
}

// The direct convolution and its two gradients, in double.
void Reference(const Conv2dGeometry& g, const float* x, const float* w, const float* dy,
               std::vector<double>* y, std::vector<double>* dx, std::vector<double>* dw) {
  y->assign(g.n * g.oh * g.ow * g.k, 0);
  dx->assign(g.n * g.h * g.w * g.c, 0);
  dw->assign(g.k * g.kh * g.kw * g.c, 0);
  for (int64_t b = 0; b < g.n; ++b) {
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        for (int64_t k = 0; k < g.k; ++k) {
          const int64_t yi = ((b * g.oh + oy) * g.ow + ox) * g.k + k;
          for (int64_t i = 0; i < g.kh; ++i) {
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t iy = oy * g.stride_h - g.pad_top + i;
              const int64_t ix = ox * g.stride_w - g.pad_left + j;
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
              for (int64_t c = 0; c < g.c; ++c) {
                const int64_t xi = ((b * g.h + iy) * g.w + ix) * g.c + c;
                const int64_t wi = ((k * g.kh + i) * g.kw + j) * g.c + c;
                (*y)[yi] += static_cast<double>(x[xi]) * w[wi];
                (*dx)[xi] += static_cast<double>(dy[yi]) * w[wi];
                (*dw)[wi] += static_cast<double>(dy[yi]) * x[xi];
              }
            }
          }
        }
      }
    }
  }
}

// Largest |got - want| over max(1, |want|).
double WorstError(const float* got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  }
  return worst;
}

void Check(const Conv2dGeometry& g) {
  SCOPED_TRACE(g.DebugString());
  auto plan = Conv2dPlan::Create(g, /*need_backward_data=*/true, /*own_kernels=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Guarded x(g.n * g.h * g.w * g.c), w(g.k * g.kh * g.kw * g.c), y(g.n * g.oh * g.ow * g.k);
  Guarded dy(y.n), dx(x.n), dw(w.n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (Guarded* t : {&x, &w, &dy}) {
    for (int64_t i = 0; i < t->n; ++i) t->data()[i] = u(rng);
  }
  std::vector<double> ry, rdx, rdw;
  Reference(g, x.data(), w.data(), dy.data(), &ry, &rdx, &rdw);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE((*plan)->Forward(x.data(), w.data(), nullptr, y.data()).ok());
    ASSERT_TRUE((*plan)->BackwardData(dy.data(), w.data(), dx.data()).ok());
    ASSERT_TRUE((*plan)->BackwardWeights(x.data(), dy.data(), dw.data(), nullptr).ok());
    // Heap traffic between steps: a corrupted heap aborts here.
    std::vector<std::unique_ptr<float[]>> churn;
    for (int i = 0; i < 64; ++i) churn.emplace_back(new float[16 << (i % 8)]());
  }
  EXPECT_EQ(x.Trampled(), 0) << "written outside x";
  EXPECT_EQ(w.Trampled(), 0) << "written outside w";
  EXPECT_EQ(dy.Trampled(), 0) << "written outside dy";
  EXPECT_EQ(y.Trampled(), 0) << "written outside y";
  EXPECT_EQ(dx.Trampled(), 0) << "written outside dx";
  EXPECT_EQ(dw.Trampled(), 0) << "written outside dw";
  // fp32 sums of terms of magnitude <= 1: y and dx of at most 3 x 3 x 64,
  // dw of n x oh x ow (16,384 for the stem at batch 16), in oneDNN's order.
  EXPECT_LT(WorstError(y.data(), ry), 1e-4);
  EXPECT_LT(WorstError(dx.data(), rdx), 1e-4);
  EXPECT_LT(WorstError(dw.data(), rdw), 1e-3);
}

TEST(Conv2dPlan, NarrowResNet18GeometriesMatchTheReference) {
  for (const int64_t n : {1, 16}) {
    Check(Geometry(n, 64, 3, 8, 7, 2, 2, 3));   // the stem (asymmetric padding)
    Check(Geometry(n, 16, 8, 8, 3, 1, 1, 1));   // layer1
    Check(Geometry(n, 16, 8, 16, 3, 2, 0, 1));  // layer2's first, stride 2
    Check(Geometry(n, 16, 8, 16, 1, 2, 0, 0));  // its downsample
    Check(Geometry(n, 8, 16, 16, 3, 1, 1, 1));  // layer2
    Check(Geometry(n, 4, 32, 32, 3, 1, 1, 1));  // layer3
    Check(Geometry(n, 2, 64, 64, 3, 1, 1, 1));  // layer4
    Check(Geometry(n, 8, 16, 32, 1, 2, 0, 0));  // full-width downsamples
    Check(Geometry(n, 8, 64, 128, 1, 2, 0, 0));
  }
}

}  // namespace
}  // namespace yoke::engine::cpu
