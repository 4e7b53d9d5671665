// fp16 / bf16 on the CPU: conversion from and to f32, and the elementwise
// sums the Gloo backend reduces half-precision buffers with.
//
// Rounding is round-to-nearest-even everywhere (as CUDA's __float2half_rn
// and __float2bfloat16_rn), so a sum computed here matches one computed on a
// GPU. A half sum is exact-then-rounded: a + b is formed in f32 (exact for
// two halves) and rounded once to the half type.
//
// F16C instructions are used when the CPU has them (checked once at run
// time); the build targets x86-64-v2, which lacks them. Thread-safe.
#ifndef YOKE_COLLECTIVE_HALF_H_
#define YOKE_COLLECTIVE_HALF_H_

#include <cstddef>
#include <cstdint>

namespace yoke::collective {

// dst[i] = half(src[i]) for i < n.
void F32ToF16(const float* src, uint16_t* dst, size_t n);
void F32ToBF16(const float* src, uint16_t* dst, size_t n);
// dst[i] = float(src[i]).
void F16ToF32(const uint16_t* src, float* dst, size_t n);
void BF16ToF32(const uint16_t* src, float* dst, size_t n);

// out[i] = round(a[i] + b[i]); `out` may alias `a` or `b`.
void SumF16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n);
void SumBF16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n);

// Scalar conversions (reference implementations; also used by tests).
uint16_t F32ToF16Scalar(float f);
float F16ToF32Scalar(uint16_t h);
uint16_t F32ToBF16Scalar(float f);
float BF16ToF32Scalar(uint16_t h);

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_HALF_H_
