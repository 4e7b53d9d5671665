// Correctly rounded arithmetic that nvcc may not fuse.
//
// nvcc contracts a * b + c into one fused multiply-add in device code
// (--fmad=true is its default), which rounds once where the CPU engine
// (built for x86-64-v2, no FMA) rounds twice. A functor (math/hd.h) that must
// equal the CPU bit for bit writes such expressions with these helpers: on
// the device they are the _rn intrinsics, which nvcc never contracts; on the
// host they are the plain operators. Exp and Log are the platform's
// (glibc's on the host, CUDA's on the device, within 1 ulp of each other). Include no CUDA header;
// allocate nothing.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_EXACT_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_EXACT_H_

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

#if defined(__CUDA_ARCH__)
YOKE_HD inline float Mul(float a, float b) { return __fmul_rn(a, b); }
YOKE_HD inline float Add(float a, float b) { return __fadd_rn(a, b); }
YOKE_HD inline float Sub(float a, float b) { return __fsub_rn(a, b); }
YOKE_HD inline float Div(float a, float b) { return __fdiv_rn(a, b); }
YOKE_HD inline float Sqrt(float a) { return __fsqrt_rn(a); }
YOKE_HD inline double Mul(double a, double b) { return __dmul_rn(a, b); }
YOKE_HD inline double Add(double a, double b) { return __dadd_rn(a, b); }
YOKE_HD inline double Sub(double a, double b) { return __dsub_rn(a, b); }
YOKE_HD inline double Div(double a, double b) { return __ddiv_rn(a, b); }
YOKE_HD inline double Exp(double a) { return ::exp(a); }
YOKE_HD inline double Log(double a) { return ::log(a); }
#else
YOKE_HD inline float Mul(float a, float b) { return a * b; }
YOKE_HD inline float Add(float a, float b) { return a + b; }
YOKE_HD inline float Sub(float a, float b) { return a - b; }
YOKE_HD inline float Div(float a, float b) { return a / b; }
YOKE_HD inline float Sqrt(float a) { return std::sqrt(a); }
YOKE_HD inline double Mul(double a, double b) { return a * b; }
YOKE_HD inline double Add(double a, double b) { return a + b; }
YOKE_HD inline double Sub(double a, double b) { return a - b; }
YOKE_HD inline double Div(double a, double b) { return a / b; }
YOKE_HD inline double Exp(double a) { return std::exp(a); }
YOKE_HD inline double Log(double a) { return std::log(a); }
#endif

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_EXACT_H_
