// Float arithmetic that rounds like the CPU engine on both host and device.
//
// nvcc contracts a * b + c into one fused multiply-add (one rounding) by
// default; the CPU engine (built for x86-64-v2, without FMA) rounds the
// product and the sum separately. Functors whose CPU twin accumulates
// products use MulRn for the product, which nvcc never fuses (__fmul_rn),
// so the device result equals the CPU's bit for bit where the order of the
// additions is the same. On the host MulRn is the plain product.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_ROUND_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_ROUND_H_

#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

// a * b rounded to float, never fused into a following add.
YOKE_HD inline float MulRn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_ROUND_H_
