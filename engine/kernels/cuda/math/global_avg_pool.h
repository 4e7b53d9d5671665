// Per-element functors of global_avg_pool: the mean over all spatial
// positions of each channel, x: (N, HW, C) channels-last -> y: (N, C).
//
// Forward: one i per output (image, channel), summing its HW inputs in
// position order from 0.0f and then multiplying by 1 / HW, exactly the
// order and rounding of the CPU GlobalAvgPoolLayer, so the results equal it
// bit for bit (host and device alike: no product is added).
// Backward: one i per input element, dx = dy(image, channel) * (1 / HW).
// Each f(i) writes only element i of its output.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_GLOBAL_AVG_POOL_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_GLOBAL_AVG_POOL_H_

#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

// i in [0, N * C): y[i] = sum_p x[n, p, c] / HW.
struct GapForwardFn {
  const float* x;
  float* y;
  int64_t hw, c;
  float inv;  // 1.0f / HW, computed in float as the CPU does
  YOKE_HD void operator()(int64_t i) const {
    const int64_t n = i / c, j = i - n * c;
    const float* xi = x + n * hw * c + j;
    float sum = 0.0f;
    for (int64_t p = 0; p < hw; ++p) sum += xi[p * c];
    y[i] = sum * inv;
  }
};

// i in [0, N * HW * C): dx[i] = dy[n, c] * inv.
struct GapBackwardFn {
  const float* dy;
  float* dx;
  int64_t hw, c;
  float inv;
  YOKE_HD void operator()(int64_t i) const {
    const int64_t n = i / (hw * c), j = i % c;
    dx[i] = dy[n * c + j] * inv;
  }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_GLOBAL_AVG_POOL_H_
