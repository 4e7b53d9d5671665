// The global_avg_pool functors (global_avg_pool.h) against the CPU
// GlobalAvgPoolLayer: same summation order and rounding, so equal bit for
// bit, over odd shapes (batch 1 and 3, C 1 and 3, non-square images).
#include <string>
#include <vector>

#include "engine/kernels/cuda/math/functor_test_util.h"
#include "engine/kernels/cuda/math/global_avg_pool.h"
#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/layers/global_avg_pool.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

void Check(int64_t n, int64_t h, int64_t w, int64_t c) {
  SCOPED_TRACE("x(" + std::to_string(n) + "," + std::to_string(h) + "," + std::to_string(w) + "," +
               std::to_string(c) + ")");
  const int64_t hw = h * w;
  std::vector<float> x = testing::Random(n * hw * c, 1, -5.0f, 5.0f);
  std::vector<float> dy = testing::Random(n * c, 2);
  GlobalAvgPoolLayer cpu;
  const testing::CpuRun want = testing::RunCpuLayer(cpu, {h, w, c}, x, dy);

  const float inv = 1.0f / static_cast<float>(hw);
  std::vector<float> y(n * c, -7.0f), dx(n * hw * c, -7.0f);
  HostForEach(n * c, GapForwardFn{x.data(), y.data(), hw, c, inv});
  testing::ExpectBitwise(y, want.y, "forward");
  HostForEach(n * hw * c, GapBackwardFn{dy.data(), dx.data(), hw, c, inv});
  testing::ExpectBitwise(dx, want.dx, "backward");
}

TEST(GlobalAvgPoolFnTest, MatchesCpuLayerBitwise) {
  for (int64_t n : {1, 3}) {
    for (int64_t c : {1, 3, 8}) {
      Check(n, 1, 1, c);
      Check(n, 5, 3, c);
      Check(n, 7, 7, c);
    }
  }
}

}  // namespace
}  // namespace yoke::engine::cuda
