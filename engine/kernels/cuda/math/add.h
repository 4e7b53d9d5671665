// Per-element functor of the add layer (residual joins): y = a + b. The
// CPU AddLayer (engine/layers/add.cc) adds the first two inputs, then each
// further input in order; the device does the same with AddFn followed by
// AddInPlaceFn (math/arith.h) per extra input, so the sums round alike.
//
// Contract: f(i) reads a[i], b[i] and writes only y[i]; y may alias a or b.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_ADD_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_ADD_H_

#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

// y[i] = a[i] + b[i].
struct AddFn {
  const float* a;
  const float* b;
  float* y;
  YOKE_HD void operator()(int64_t i) const { y[i] = a[i] + b[i]; }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_ADD_H_
