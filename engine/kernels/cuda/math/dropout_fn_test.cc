// The dropout functors (dropout.h) against the CPU DropoutLayer: the same
// mask bit for bit (seed, step, replica and layer index all varied; sizes
// that are not a multiple of 4), and the same y and dx (same products).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda/math/dropout.h"
#include "engine/kernels/cuda/math/functor_test_util.h"
#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/layers/dropout.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

void Check(float rate, int64_t batch, int64_t features, const LayerContext& ctx, int index) {
  SCOPED_TRACE(absl::StrCat("rate ", rate, " x(", batch, ",", features, ") seed ", ctx.seed,
                            " step ", ctx.step, " replica ", ctx.replica, " index ", index));
  const int64_t n = batch * features;
  std::vector<float> x = testing::Random(n, 11), dy = testing::Random(n, 12);
  DropoutLayer cpu(rate);
  cpu.set_index(index);
  const testing::CpuRun want = testing::RunCpuLayer(cpu, {features}, x, dy, ctx);
  std::vector<uint8_t> want_mask(cpu.mask().data<uint8_t>(), cpu.mask().data<uint8_t>() + n);

  const DropoutDraw d = DropoutParams(rate, ctx.seed, ctx.step, ctx.replica, index);
  std::vector<float> y(n, -7.0f), dx(n, -7.0f);
  std::vector<uint8_t> mask(n, 9);
  HostForEach((n + 3) / 4, DropoutForwardFn{d, x.data(), y.data(), mask.data(), n});
  HostForEach(n, DropoutBackwardFn{mask.data(), dy.data(), dx.data(), d.scale});
  EXPECT_EQ(mask, want_mask);
  testing::ExpectBitwise(y, want.y, "forward");
  testing::ExpectBitwise(dx, want.dx, "backward");
}

TEST(DropoutFnTest, MaskOutputAndGradientMatchCpuLayer) {
  for (float rate : {0.1f, 0.5f, 0.9f}) {
    for (int64_t batch : {1, 3}) {
      for (int64_t features : {1, 3, 5, 1027}) {
        LayerContext ctx;
        ctx.training = true;
        ctx.seed = 77;
        ctx.step = 5;
        Check(rate, batch, features, ctx, 0);
        ctx.seed = 0xDEADBEEFCAFEull;
        ctx.step = 123456;
        ctx.replica = 3;
        Check(rate, batch, features, ctx, 17);
      }
    }
  }
}

// Big enough to cross the CPU's 1024-block chunks and its parallel
// threshold; every step, replica and index gives another mask.
TEST(DropoutFnTest, LargeTensorAcrossCpuChunks) {
  LayerContext ctx;
  ctx.seed = 9;
  ctx.step = 2;
  ctx.replica = 65535;
  Check(0.3f, 3, 40001, ctx, 65535);
}

TEST(DropoutFnTest, ParamsMatchCpuThresholdEdges) {
  EXPECT_EQ(DropoutParams(0.0f, 1, 0, 0, 0).threshold, 0u);
  EXPECT_EQ(DropoutParams(0.5f, 1, 0, 0, 0).threshold, 2147483648u);
  EXPECT_EQ(DropoutParams(0.5f, 1, 0, 0, 0).scale, 2.0f);
  EXPECT_EQ(DropoutParams(0.5f, 1, 0, 2, 3).base, (uint64_t{2} << 48) | (uint64_t{3} << 32));
}

}  // namespace
}  // namespace yoke::engine::cuda
