// Test-only helpers for the host tests of the kernels' functors (the
// *_test.cc files of this folder): random inputs, a CPU layer run on host
// tensors, and a bit-for-bit comparison of float arrays.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_FUNCTOR_TEST_UTIL_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_FUNCTOR_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/layer.h"
#include "engine/tensor.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda::testing {

inline std::vector<float> Random(int64_t n, uint64_t stream, float lo = -2.0f, float hi = 2.0f) {
  return engine::testing::UniformVector(n, 1234, stream, lo, hi);
}

// Every element of `got` has the bits of `want` (so -0 != +0, NaN == NaN).
inline void ExpectBitwise(const std::vector<float>& got, const std::vector<float>& want,
                          const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b && bad++ < 5)
      ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " vs " << want[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// |got - want| <= rel * max(1, |want|) element by element.
inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float rel,
                       const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float tol = rel * std::fmax(1.0f, std::fabs(want[i]));
    if (!(std::fabs(got[i] - want[i]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " vs " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// Runs `layer` (built on `in_shape`, batch n first) Forward on x, then
// Backward of dy; returns y and dx.
struct CpuRun {
  std::vector<float> y, dx;
};
inline CpuRun RunCpuLayer(Layer& layer, const Shape& in_shape, std::vector<float> x,
                          std::vector<float> dy_in, const LayerContext& ctx = {}) {
  ParamSet params;
  absl::StatusOr<Shape> out = layer.Build({in_shape}, &params);
  EXPECT_TRUE(out.ok()) << out.status();
  const int64_t n = static_cast<int64_t>(x.size()) / NumElements(in_shape);
  Shape xs{n}, ys{n};
  xs.insert(xs.end(), in_shape.begin(), in_shape.end());
  ys.insert(ys.end(), out->begin(), out->end());
  CpuRun r;
  r.y.assign(n * NumElements(*out), 0.0f);
  r.dx.assign(x.size(), 0.0f);
  Tensor xt = Tensor::Wrap(x.data(), xs), yt = Tensor::Wrap(r.y.data(), ys);
  Tensor dyt = Tensor::Wrap(dy_in.data(), ys), dxt = Tensor::Wrap(r.dx.data(), xs);
  EXPECT_TRUE(layer.Forward({&xt}, &yt, ctx).ok());
  if (!dy_in.empty()) {
    EXPECT_TRUE(layer.Backward({&xt}, yt, dyt, {&dxt}, ctx).ok());
  }
  return r;
}

}  // namespace yoke::engine::cuda::testing

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_FUNCTOR_TEST_UTIL_H_
