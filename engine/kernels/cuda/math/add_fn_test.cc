// The add functors (add.h, arith.h) in the order the CUDA add layer runs
// them, against the CPU AddLayer with 2, 3 and 4 inputs: the same sums in
// the same order, so equal bit for bit.
#include <vector>

#include "engine/kernels/cuda/math/add.h"
#include "engine/kernels/cuda/math/arith.h"
#include "engine/kernels/cuda/math/functor_test_util.h"
#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/layers/add.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

TEST(AddFnTest, MatchesCpuLayerForTwoToFourInputs) {
  for (int inputs : {2, 3, 4}) {
    for (int64_t batch : {1, 3}) {
      const Shape shape{5, 3, 3};
      const int64_t n = batch * NumElements(shape);
      std::vector<std::vector<float>> xs;
      // Magnitudes far apart make the summation order visible in the bits.
      for (int k = 0; k < inputs; ++k) xs.push_back(testing::Random(n, k, -1e3f, 1e3f));
      for (int64_t i = 0; i < n; i += 2) xs[1][i] *= 1e-6f;

      AddLayer cpu;
      ParamSet params;
      ASSERT_TRUE(cpu.Build(std::vector<Shape>(inputs, shape), &params).ok());
      std::vector<Tensor> ts;
      std::vector<const Tensor*> in;
      for (auto& x : xs) ts.push_back(Tensor::Wrap(x.data(), {batch, 5, 3, 3}));
      for (auto& t : ts) in.push_back(&t);
      std::vector<float> want(n);
      Tensor yt = Tensor::Wrap(want.data(), {batch, 5, 3, 3});
      ASSERT_TRUE(cpu.Forward(in, &yt, {}).ok());

      std::vector<float> y(n, -1.0f);
      HostForEach(n, AddFn{xs[0].data(), xs[1].data(), y.data()});
      for (int k = 2; k < inputs; ++k) HostForEach(n, AddInPlaceFn{y.data(), xs[k].data()});
      testing::ExpectBitwise(y, want, "add forward");
    }
  }
}

}  // namespace
}  // namespace yoke::engine::cuda
