// Uniform random test data, the same on every run and machine (test-only).
//
// Each helper draws from common::Philox(seed, stream), so a test that needs
// two independent arrays passes two seeds (or streams) and always sees the
// same values.
#ifndef YOKE_ENGINE_TESTING_RANDOM_H_
#define YOKE_ENGINE_TESTING_RANDOM_H_

#include <cstdint>
#include <vector>

#include "engine/rng.h"
#include "engine/tensor.h"

namespace yoke::engine::testing {

// p[0, n) = U(lo, hi).
inline void FillUniform(float* p, int64_t n, uint64_t seed, uint64_t stream, float lo = -1.0f,
                        float hi = 1.0f) {
  common::Philox rng(seed, stream);
  for (int64_t i = 0; i < n; ++i) p[i] = lo + (hi - lo) * rng.NextFloat();
}

// Every element of a float tensor = U(lo, hi).
inline void FillUniform(const Tensor& t, uint64_t seed, uint64_t stream, float lo = -1.0f,
                        float hi = 1.0f) {
  FillUniform(t.data<float>(), t.numel(), seed, stream, lo, hi);
}

// n values of U(lo, hi).
inline std::vector<float> UniformVector(int64_t n, uint64_t seed, uint64_t stream, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  FillUniform(v.data(), n, seed, stream, lo, hi);
  return v;
}

}  // namespace yoke::engine::testing

#endif  // YOKE_ENGINE_TESTING_RANDOM_H_
