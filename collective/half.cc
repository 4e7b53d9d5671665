#include "collective/half.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>

namespace yoke::collective {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// F16C from CPUID leaf 1 (clang's __builtin_cpu_supports has no "f16c");
// "avx" also checks that the OS saves the YMM registers.
bool HaveF16c() {
  static const bool have = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) != 0 &&
           (c & bit_F16C) != 0;
  }();
  return have;
}

// Elements per chunk when a sum goes through f32 (fits in L1 with room).
constexpr size_t kChunk = 1024;

__attribute__((target("avx,f16c"))) void F32ToF16F16c(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = F32ToF16Scalar(src[i]);
}

__attribute__((target("avx,f16c"))) void F16ToF32F16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = F16ToF32Scalar(src[i]);
}

__attribute__((target("avx,f16c"))) void SumF16F16c(uint16_t* out, const uint16_t* a,
                                                    const uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    __m128i s = _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), s);
  }
  for (; i < n; ++i) out[i] = F32ToF16Scalar(F16ToF32Scalar(a[i]) + F16ToF32Scalar(b[i]));
}

}  // namespace

uint16_t F32ToF16Scalar(float f) {
  const uint32_t x = Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): scale so the half ulp (2^-24) becomes 1 and
    // let the FPU round to nearest even.
    const float scaled = FromBits(abs) * 16777216.0f;  // 2^24
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits.
  uint32_t h = (abs >> 13) - ((127u - 15u) << 10);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float F16ToF32Scalar(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) * (1.0f / 16777216.0f);  // man * 2^-24
    return FromBits(Bits(v) | sign);
  }
  if (exp == 31) return FromBits(sign | 0x7f800000u | (man << 13));
  return FromBits(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

uint16_t F32ToBF16Scalar(float f) {
  const uint32_t x = Bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // nan
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float BF16ToF32Scalar(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }

void F32ToF16(const float* src, uint16_t* dst, size_t n) {
  if (HaveF16c()) return F32ToF16F16c(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = F32ToF16Scalar(src[i]);
}

void F16ToF32(const uint16_t* src, float* dst, size_t n) {
  if (HaveF16c()) return F16ToF32F16c(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32Scalar(src[i]);
}

void F32ToBF16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = F32ToBF16Scalar(src[i]);
}

void BF16ToF32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = BF16ToF32Scalar(src[i]);
}

void SumF16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  if (HaveF16c()) return SumF16F16c(out, a, b, n);
  for (size_t i = 0; i < n; ++i)
    out[i] = F32ToF16Scalar(F16ToF32Scalar(a[i]) + F16ToF32Scalar(b[i]));
}

void SumBF16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  // Through f32 in L1-sized chunks, so both conversions vectorise.
  float x[kChunk], y[kChunk];
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t m = n - i < kChunk ? n - i : kChunk;
    BF16ToF32(a + i, x, m);
    BF16ToF32(b + i, y, m);
    for (size_t j = 0; j < m; ++j) x[j] += y[j];
    F32ToBF16(x, out + i, m);
  }
}

}  // namespace yoke::collective
