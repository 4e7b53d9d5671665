// Per-row functors of the softmax layer over the last dimension (length K),
// as the CPU SoftmaxLayer (engine/layers/softmax.cc):
//   forward   m = max_j x_j (first to last), y_j = exp(x_j - m),
//             s = sum_j y_j (in order), y_j *= 1 / s
//   backward  dot = sum_j y_j dy_j, dx_j = y_j (dy_j - dot)
// One i per row, which writes only its own row (K elements). Forward equals
// the CPU bit for bit on the host (same order, same libm; the device's exp
// is CUDA's). Backward adds the products in order, where the CPU's
// vectorised reduction adds them in SIMD lanes: the two agree to rounding.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_SOFTMAX_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_SOFTMAX_H_

#include <cmath>
#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"
#include "engine/kernels/cuda/math/round.h"

namespace yoke::engine::cuda {

// i in [0, rows): y[i, :] = softmax(x[i, :]).
struct SoftmaxForwardFn {
  const float* x;
  float* y;
  int64_t k;
  YOKE_HD void operator()(int64_t i) const {
    const float* xr = x + i * k;
    float* yr = y + i * k;
    float mx = xr[0];
    for (int64_t j = 1; j < k; ++j) mx = xr[j] > mx ? xr[j] : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      yr[j] = std::exp(xr[j] - mx);
      sum += yr[j];
    }
    const float inv = 1.0f / sum;  // sum >= 1: the max's term is exp(0)
    for (int64_t j = 0; j < k; ++j) yr[j] *= inv;
  }
};

// i in [0, rows): dx[i, :] = y (dy - <y, dy>) on row i.
struct SoftmaxBackwardFn {
  const float* y;
  const float* dy;
  float* dx;
  int64_t k;
  YOKE_HD void operator()(int64_t i) const {
    const float* yr = y + i * k;
    const float* gr = dy + i * k;
    float* dr = dx + i * k;
    float dot = 0.0f;
    for (int64_t j = 0; j < k; ++j) dot += MulRn(yr[j], gr[j]);
    for (int64_t j = 0; j < k; ++j) dr[j] = yr[j] * (gr[j] - dot);
  }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_SOFTMAX_H_
