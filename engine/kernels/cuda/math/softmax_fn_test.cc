// The softmax functors (softmax.h) against the CPU SoftmaxLayer, rows of
// K = 1, 3, 10 and 257, over ranks 2 and 4, batch 1 and 3.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda/math/functor_test_util.h"
#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/kernels/cuda/math/softmax.h"
#include "engine/layers/softmax.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

void Check(int64_t batch, const Shape& shape) {
  const int64_t k = shape.back(), n = batch * NumElements(shape), rows = n / k;
  SCOPED_TRACE(absl::StrCat("batch ", batch, " rank ", shape.size() + 1, " k ", k));
  // Large logits: the max subtraction must keep exp finite.
  std::vector<float> x = testing::Random(n, 21, -60.0f, 60.0f), dy = testing::Random(n, 22);
  SoftmaxLayer cpu;
  const testing::CpuRun want = testing::RunCpuLayer(cpu, shape, x, dy);

  std::vector<float> y(n, -7.0f), dx(n, -7.0f);
  HostForEach(rows, SoftmaxForwardFn{x.data(), y.data(), k});
  testing::ExpectBitwise(y, want.y, "forward");
  HostForEach(rows, SoftmaxBackwardFn{y.data(), dy.data(), dx.data(), k});
  // The CPU sums y * dy in SIMD lanes (an OpenMP simd reduction), the
  // functor in order: the dot products differ by rounding only, a few ulp
  // of max|y dy| <= 1 for these rows.
  testing::ExpectNear(dx, want.dx, 1e-6f, "backward");
}

TEST(SoftmaxFnTest, MatchesCpuLayer) {
  for (int64_t batch : {1, 3}) {
    for (int64_t k : {1, 3, 10, 257}) {
      Check(batch, {k});
      Check(batch, {3, 2, k});
    }
  }
}

// One row per i: a row's functor leaves the other rows alone.
TEST(SoftmaxFnTest, WritesOnlyItsRow) {
  std::vector<float> x = testing::Random(12, 3), y(12, 5.0f);
  SoftmaxForwardFn{x.data(), y.data(), 4}(1);
  float sum = 0.0f;
  for (int j = 0; j < 12; ++j) {
    if (j >= 4 && j < 8) {
      sum += y[j];
    } else {
      EXPECT_EQ(y[j], 5.0f) << j;
    }
  }
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
}

}  // namespace
}  // namespace yoke::engine::cuda
