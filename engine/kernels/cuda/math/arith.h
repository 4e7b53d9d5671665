// Per-element arithmetic functors shared by the CUDA kernels and their host
// tests (see math/hd.h).
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_ARITH_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_ARITH_H_

#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

// dst[i] += src[i].
struct AddInPlaceFn {
  float* dst;
  const float* src;
  YOKE_HD void operator()(int64_t i) const { dst[i] += src[i]; }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_ARITH_H_
