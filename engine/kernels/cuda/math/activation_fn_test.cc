// The activation functors (activation.h) against the CPU ActivationLayer:
// same expressions and host libm, so equal bit for bit.
#include <string>
#include <vector>

#include "engine/kernels/cuda/math/activation.h"
#include "engine/kernels/cuda/math/functor_test_util.h"
#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/layers/activation.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

using testing::ExpectBitwise;
using testing::Random;
using testing::RunCpuLayer;

// Runs kind K's functors and the CPU layer of `cpu_kind` on n elements.
template <ActKind K>
void CheckKind(ActivationLayer::Kind cpu_kind, float alpha, int64_t n, const std::string& name) {
  SCOPED_TRACE(name + " n=" + std::to_string(n));
  // Wide range: sigmoid saturates, exp(-x) overflows for x << 0.
  std::vector<float> x = Random(n, 1, -12.0f, 12.0f);
  if (n > 3) x[0] = 0.0f, x[1] = -0.0f, x[2] = -100.0f, x[3] = 100.0f;
  const std::vector<float> dy = Random(n, 2);
  ActivationLayer cpu(cpu_kind, alpha);
  const testing::CpuRun want = RunCpuLayer(cpu, {n}, x, dy);

  std::vector<float> y(n, -7.0f), dx(n, -7.0f);
  HostForEach(n, ActForwardFn<K>{x.data(), y.data(), alpha});
  ExpectBitwise(y, want.y, "forward");
  // Backward reads the functor's own output, as the device does.
  HostForEach(n, ActBackwardFn<K>{x.data(), y.data(), dy.data(), dx.data(), alpha});
  ExpectBitwise(dx, want.dx, "backward");
}

TEST(ActivationFnTest, EveryKindMatchesCpuLayerBitwise) {
  using CK = ActivationLayer::Kind;
  for (int64_t n : {1, 3, 1027}) {
    CheckKind<ActKind::kRelu>(CK::kRelu, 0.0f, n, "relu");
    CheckKind<ActKind::kLeakyRelu>(CK::kLeakyRelu, 0.2f, n, "leaky_relu");
    CheckKind<ActKind::kLeakyRelu>(CK::kLeakyRelu, 0.01f, n, "leaky_relu default");
    CheckKind<ActKind::kSigmoid>(CK::kSigmoid, 0.0f, n, "sigmoid");
    CheckKind<ActKind::kTanh>(CK::kTanh, 0.0f, n, "tanh");
    CheckKind<ActKind::kGelu>(CK::kGelu, 0.0f, n, "gelu");
  }
}

// The functor writes element i only (a wrong index would leave the
// sentinel or clobber a neighbour).
TEST(ActivationFnTest, WritesOnlyItsOwnElement) {
  std::vector<float> x = Random(8, 3), y(8, 42.0f);
  ActForwardFn<ActKind::kTanh> f{x.data(), y.data(), 0.0f};
  f(5);
  for (int i = 0; i < 8; ++i) {
    if (i == 5) {
      EXPECT_EQ(y[i], Act<ActKind::kTanh>::Forward(x[i], 0.0f));
    } else {
      EXPECT_EQ(y[i], 42.0f) << i;
    }
  }
}

}  // namespace
}  // namespace yoke::engine::cuda
