// Per-element functors of inverted dropout, with the CPU DropoutLayer's
// masks (engine/layers/dropout.cc) bit for bit:
//  - key = job seed ^ kDropoutKey, Philox stream = the global step;
//  - element e draws word e % 4 of Philox block base + e / 4, where
//    base = replica << 48 | layer index << 32;
//  - e is dropped when its draw < threshold = min(2^32 - 1,
//    floor(rate * 2^32)) (in double), kept ones scaled by 1 / (1 - rate).
// DropoutParams() computes (key, base, threshold, scale) as the CPU does.
//
// Forward: one i per Philox block, writing elements 4i .. 4i+3 (those < n)
// of y and the u8 mask (1 = kept); y = x * (scale * keep), as the CPU.
// Backward: one i per element, dx = dy * (scale * mask).
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_DROPOUT_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_DROPOUT_H_

#include <cmath>
#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"
#include "engine/kernels/cuda/math/philox.h"

namespace yoke::engine::cuda {

// "DROPOUT!": separates dropout's key from parameter initialisation's (the
// bare job seed); the CPU layer's constant.
constexpr uint64_t kDropoutKey = 0x44524F504F555421ull;

struct DropoutDraw {
  uint64_t key = 0, stream = 0, base = 0;
  uint32_t threshold = 0;
  float scale = 1.0f;
};

// Host-side: the draw of one training Forward. The caller has checked
// 0 <= replica, index < 65536 (the counter layout's limits).
inline DropoutDraw DropoutParams(float rate, uint64_t seed, int64_t step, int replica, int index) {
  DropoutDraw d;
  d.key = seed ^ kDropoutKey;
  d.stream = static_cast<uint64_t>(step);
  d.base = (static_cast<uint64_t>(replica) << 48) | (static_cast<uint64_t>(index) << 32);
  d.threshold = static_cast<uint32_t>(
      std::fmin(4294967295.0, std::floor(static_cast<double>(rate) * 4294967296.0)));
  d.scale = 1.0f / (1.0f - rate);
  return d;
}

// i in [0, ceil(n / 4)): the mask and output of elements 4i .. 4i+3.
struct DropoutForwardFn {
  DropoutDraw d;
  const float* x;
  float* y;
  uint8_t* mask;
  int64_t n;
  YOKE_HD void operator()(int64_t i) const {
    const PhiloxDraws r = PhiloxBlock(d.key, d.stream, d.base + static_cast<uint64_t>(i));
    for (int k = 0; k < 4; ++k) {
      const int64_t e = 4 * i + k;
      if (e >= n) break;
      const uint8_t keep = r.v[k] >= d.threshold;
      mask[e] = keep;
      y[e] = x[e] * (d.scale * static_cast<float>(keep));
    }
  }
};

// i in [0, n): dx[i] = dy[i] * (scale * mask[i]).
struct DropoutBackwardFn {
  const uint8_t* mask;
  const float* dy;
  float* dx;
  float scale;
  YOKE_HD void operator()(int64_t i) const {
    dx[i] = dy[i] * (scale * static_cast<float>(mask[i]));
  }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_DROPOUT_H_
