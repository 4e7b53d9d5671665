// Conv2dPlan through oneDNN against a direct reference, for the geometries
// of a narrow ResNet-18 at 64x64 (8 to 64 channels, batch 1 and 16), with
// guard bands around every buffer: the results must match and nothing may
// be written outside the buffers the caller passed. Each geometry runs
// several steps, with heap traffic between them, so a kernel that corrupts
// the heap is caught here and not in a later, unrelated test.
#include "engine/kernels/cpu/conv.h"

#include <cmath>
#include <cstdint>
#include <cstring>
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

// x rounded to bf16 as oneDNN's conversion rounds (to nearest, ties to
// even; the inputs here are finite).
float RoundToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  bits += 0x7fff + ((bits >> 16) & 1);
  bits &= 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, sizeof(r));
  return r;
}

// A bf16 plan computes the convolution of x, w and dy rounded to bf16 with
// fp32 sums: it matches the double reference of the rounded inputs to fp32
// accuracy, and that reference is far (many times the tolerance) from the
// unrounded one, so a plan that ran in fp32 would fail here.
void CheckBf16(Conv2dGeometry g, bool bias) {
  g.bf16 = true;
  g.bias = bias;
  SCOPED_TRACE(g.DebugString());
  auto plan = Conv2dPlan::Create(g, /*need_backward_data=*/true, /*own_kernels=*/false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  Guarded x(g.n * g.h * g.w * g.c), w(g.k * g.kh * g.kw * g.c), y(g.n * g.oh * g.ow * g.k);
  Guarded dy(y.n), dx(x.n), dw(w.n), b(g.k), db(g.k);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (Guarded* t : {&x, &w, &dy, &b}) {
    for (int64_t i = 0; i < t->n; ++i) t->data()[i] = u(rng);
  }
  auto rounded = [](const Guarded& t) {
    std::vector<float> r(t.data(), t.data() + t.n);
    for (float& v : r) v = RoundToBf16(v);
    return r;
  };
  const std::vector<float> rx = rounded(x), rw = rounded(w), rdy = rounded(dy);
  std::vector<double> ry, rdx, rdw, uy, udx, udw;
  Reference(g, rx.data(), rw.data(), rdy.data(), &ry, &rdx, &rdw);
  Reference(g, x.data(), w.data(), dy.data(), &uy, &udx, &udw);
  // The bias is added in fp32, unrounded; its gradient sums dy (rounded).
  std::vector<double> rdb(g.k, 0);
  for (size_t i = 0; bias && i < ry.size(); ++i) {
    ry[i] += b.data()[i % g.k];
    uy[i] += b.data()[i % g.k];
    rdb[i % g.k] += rdy[i];
  }
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE((*plan)->Forward(x.data(), w.data(), bias ? b.data() : nullptr, y.data()).ok());
    // BackwardData straight after BackwardWeights reuses its rounding of dy.
    ASSERT_TRUE(
        (*plan)->BackwardWeights(x.data(), dy.data(), dw.data(), bias ? db.data() : nullptr).ok());
    ASSERT_TRUE((*plan)->BackwardData(dy.data(), w.data(), dx.data()).ok());
  }
  for (const Guarded* t : {&x, &w, &dy, &y, &dx, &dw, &db}) EXPECT_EQ(t->Trampled(), 0);
  EXPECT_LT(WorstError(y.data(), ry), 1e-4);
  EXPECT_LT(WorstError(dx.data(), rdx), 1e-4);
  EXPECT_LT(WorstError(dw.data(), rdw), 1e-3);
  if (bias) {
    EXPECT_LT(WorstError(db.data(), rdb), 1e-3);
  }
  std::vector<float> uyf(uy.begin(), uy.end()), udwf(udw.begin(), udw.end());
  EXPECT_GT(WorstError(uyf.data(), ry), 1e-3) << "the test's inputs do not tell bf16 from fp32";
  EXPECT_GT(WorstError(udwf.data(), rdw), 1e-2) << "the test's inputs do not tell bf16 from fp32";
}

TEST(Conv2dPlan, Bf16ComputesTheRoundedInputsConvolution) {
  if (!CpuHasNativeBf16()) {
    GTEST_SKIP() << "no AVX-512 BF16 or AMX on this CPU (oneDNN ISA " << CpuIsaName() << ")";
  }
  // Without a bias, the 1x1 convolutions of stride 1 run their backward as
  // matrix products (Conv2dPlan's matmul path); with one, as convolutions.
  for (const bool bias : {false, true}) {
    for (const int64_t n : {1, 8}) {
      CheckBf16(Geometry(n, 32, 3, 16, 7, 2, 2, 3), bias);    // a stem
      CheckBf16(Geometry(n, 14, 32, 32, 3, 1, 1, 1), bias);   // a bottleneck's 3x3
      CheckBf16(Geometry(n, 14, 64, 32, 1, 1, 0, 0), bias);   // its reducing 1x1
      CheckBf16(Geometry(n, 14, 32, 128, 1, 1, 0, 0), bias);  // its expanding 1x1
      CheckBf16(Geometry(n, 14, 64, 128, 1, 2, 0, 0), bias);  // a strided shortcut
      CheckBf16(Geometry(n, 14, 32, 32, 3, 2, 0, 1), bias);   // a strided 3x3
      CheckBf16(Geometry(n, 5, 24, 40, 1, 1, 0, 0), bias);    // odd sizes
    }
  }
}

// The scratch is shared by every plan of the thread: a plan run between two
// others' BackwardWeights and BackwardData must not let the second reuse a
// rounding the first overwrote.
TEST(Conv2dPlan, Bf16PlansShareTheScratchSafely) {
  if (!CpuHasNativeBf16()) {
    GTEST_SKIP() << "no AVX-512 BF16 or AMX on this CPU (oneDNN ISA " << CpuIsaName() << ")";
  }
  Conv2dGeometry a = Geometry(2, 8, 16, 16, 3, 1, 1, 1), c = Geometry(2, 8, 16, 16, 1, 1, 0, 0);
  a.bf16 = c.bf16 = true;
  auto pa = Conv2dPlan::Create(a, true, false);
  auto pc = Conv2dPlan::Create(c, true, false);
  ASSERT_TRUE(pa.ok() && pc.ok());
  const int64_t act = 2 * 8 * 8 * 16;
  std::vector<float> x(act, 0.5f), w(16 * 9 * 16, 0.25f), wc(16 * 16, 0.5f), dy(act), dy2(act);
  std::vector<float> dw(w.size()), dwc(wc.size()), dx(act), dx_alone(act), dxc(act);
  for (int64_t i = 0; i < act; ++i) {
    dy[i] = static_cast<float>(i % 7) - 3;
    dy2[i] = static_cast<float>(i % 5) + 1;
  }
  ASSERT_TRUE((*pa)->BackwardData(dy.data(), w.data(), dx_alone.data()).ok());
  ASSERT_TRUE((*pa)->BackwardWeights(x.data(), dy.data(), dw.data(), nullptr).ok());
  ASSERT_TRUE((*pc)->BackwardWeights(x.data(), dy2.data(), dwc.data(), nullptr).ok());
  ASSERT_TRUE((*pa)->BackwardData(dy.data(), w.data(), dx.data()).ok());
  EXPECT_EQ(dx, dx_alone);
  EXPECT_GT(Bf16ScratchBytes(), 0);
}

// Reordered weights and the blocked weight gradient live in the thread's
// scratch, shared by every plan, so each call reorders its own weights. Two
// layers of one geometry with different weights, as a ResNet stage has: the
// second's calls between the first's Forward and backward must not hand the
// first its weights.
TEST(Conv2dPlan, PlansShareTheWeightsScratchSafely) {
  for (const Conv2dGeometry& g :
       {Geometry(2, 8, 64, 64, 3, 1, 1, 1), Geometry(2, 8, 32, 32, 1, 1, 0, 0),
        Geometry(2, 16, 16, 32, 3, 2, 1, 1)}) {
    SCOPED_TRACE(g.DebugString());
    auto pa = Conv2dPlan::Create(g, true, false);
    auto pb = Conv2dPlan::Create(g, true, false);
    ASSERT_TRUE(pa.ok() && pb.ok());
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    auto random = [&](int64_t n) {
      std::vector<float> v(n);
      for (float& f : v) f = u(rng);
      return v;
    };
    const int64_t nx = g.n * g.h * g.w * g.c, ny = g.n * g.oh * g.ow * g.k;
    const int64_t nw = g.k * g.kh * g.kw * g.c;
    const std::vector<float> x = random(nx), wa = random(nw), wb = random(nw), dy = random(ny);
    std::vector<float> y(ny), dx_alone(nx), dx(nx), dwa(nw), dwb(nw), dwa_alone(nw);
    // Alone: A's Forward right before its backward.
    ASSERT_TRUE((*pa)->Forward(x.data(), wa.data(), nullptr, y.data()).ok());
    ASSERT_TRUE((*pa)->BackwardData(dy.data(), wa.data(), dx_alone.data()).ok());
    ASSERT_TRUE((*pa)->BackwardWeights(x.data(), dy.data(), dwa_alone.data(), nullptr).ok());
    // Interleaved with B, as a model's forward and backward run them.
    ASSERT_TRUE((*pa)->Forward(x.data(), wa.data(), nullptr, y.data()).ok());
    ASSERT_TRUE((*pb)->Forward(x.data(), wb.data(), nullptr, y.data()).ok());
    ASSERT_TRUE((*pb)->BackwardData(dy.data(), wb.data(), dx.data()).ok());
    ASSERT_TRUE((*pb)->BackwardWeights(x.data(), dy.data(), dwb.data(), nullptr).ok());
    ASSERT_TRUE((*pa)->BackwardData(dy.data(), wa.data(), dx.data()).ok());
    ASSERT_TRUE((*pa)->BackwardWeights(x.data(), dy.data(), dwa.data(), nullptr).ok());
    EXPECT_EQ(dx, dx_alone) << "A's input gradient used another layer's weights";
    EXPECT_EQ(dwa, dwa_alone);
  }
}

}  // namespace
}  // namespace yoke::engine::cpu
