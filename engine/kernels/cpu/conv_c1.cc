#include "engine/kernels/cpu/conv_c1.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

namespace yoke::engine::cpu {
namespace {

constexpr int kLanes = 16;     // floats in an AVX-512 register
constexpr int kMaxBlock = 14;  // output pixels per forward block (14 + 2 registers)

#define YOKE_AVX512 __attribute__((target("avx512f")))

// Writes image `i` of x, zero-padded, into `pad`: (OH+KH-1) x (OW+KW-1).
// Stride 1, so padded row u holds input row u - pad_top.
void PadImage(const Conv2dGeometry& g, const float* x, int64_t i, float* pad) {
  const int64_t ph = g.oh + g.kh - 1, pw = g.ow + g.kw - 1;
  const float* xi = x + i * g.h * g.w;
  for (int64_t u = 0; u < ph; ++u) {
    float* row = pad + u * pw;
    const int64_t src = u - g.pad_top;
    if (src < 0 || src >= g.h) {
      std::memset(row, 0, sizeof(float) * pw);
      continue;
    }
    for (int64_t v = 0; v < pw; ++v) {
      const int64_t col = v - g.pad_left;
      row[v] = col >= 0 && col < g.w ? xi[src * g.w + col] : 0.0f;
    }
  }
}

// PW output pixels of one row and 16 channels, in registers: acc[p] = b +
// sum over taps of x(row + i, q + p + j) * w(i, j), then the ReLU if `relu`.
// `xp` points at the padded input of the block's first pixel, `wt` at the
// (KH*KW, K) weights' first channel of the group.
template <int KH, int KW, int PW>
YOKE_AVX512 __attribute__((always_inline)) inline void ConvRow(const float* xp, int64_t pad_w,
                                                               const float* wt, int64_t k,
                                                               __m512 bias, bool relu,
                                                               __m512* acc) {
#pragma GCC unroll 16
  for (int p = 0; p < PW; ++p) acc[p] = bias;
#pragma GCC unroll 8
  for (int i = 0; i < KH; ++i) {
    const float* row = xp + i * pad_w;
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) {
      const __m512 wv = _mm512_loadu_ps(wt + (i * KW + j) * k);
#pragma GCC unroll 16
      for (int p = 0; p < PW; ++p) {
        acc[p] = _mm512_fmadd_ps(_mm512_set1_ps(row[p + j]), wv, acc[p]);
      }
    }
  }
  if (relu) {
    // vmaxps returns its second operand for NaN and for +-0, so this is
    // bit for bit the ReLU layer's x > 0 ? x : 0.
#pragma GCC unroll 16
    for (int p = 0; p < PW; ++p) acc[p] = _mm512_maskz_max_ps(0xFFFF, acc[p], _mm512_setzero_ps());
  }
}

// ConvRow stored to `y`, the block's first output of the group.
template <int KH, int KW, int PW>
YOKE_AVX512 inline void ForwardBlock(const float* xp, int64_t pad_w, const float* wt, int64_t k,
                                     __m512 bias, bool relu, float* y) {
  __m512 acc[PW];
  ConvRow<KH, KW, PW>(xp, pad_w, wt, k, bias, relu, acc);
#pragma GCC unroll 16
  for (int p = 0; p < PW; ++p) _mm512_storeu_ps(y + p * k, acc[p]);
}

template <int KH, int KW, int PW>
YOKE_AVX512 void ForwardBlocks(const float* xp, int64_t pad_w, const float* wt, const float* b,
                               int64_t k, bool relu, float* y) {
  for (int64_t grp = 0; grp < k; grp += kLanes) {
    const __m512 bias = b != nullptr ? _mm512_loadu_ps(b + grp) : _mm512_setzero_ps();
    ForwardBlock<KH, KW, PW>(xp, pad_w, wt + grp, k, bias, relu, y + grp);
  }
}

template <int KH, int KW>
YOKE_AVX512 void ForwardImage(const Conv2dGeometry& g, const float* pad, const float* wt,
                              const float* b, float* yi) {
  const int64_t pad_w = g.ow + KW - 1, k = g.k;
  for (int64_t r = 0; r < g.oh; ++r) {
    const float* xr = pad + r * pad_w;
    float* yr = yi + r * g.ow * k;
    int64_t q = 0;
    for (; q + kMaxBlock <= g.ow; q += kMaxBlock) {
      ForwardBlocks<KH, KW, kMaxBlock>(xr + q, pad_w, wt, b, k, g.relu, yr + q * k);
    }
    // The rest of the row in blocks of 8, 4, 2 and 1.
    if (g.ow - q >= 8) {
      ForwardBlocks<KH, KW, 8>(xr + q, pad_w, wt, b, k, g.relu, yr + q * k);
      q += 8;
    }
    if (g.ow - q >= 4) {
      ForwardBlocks<KH, KW, 4>(xr + q, pad_w, wt, b, k, g.relu, yr + q * k);
      q += 4;
    }
    if (g.ow - q >= 2) {
      ForwardBlocks<KH, KW, 2>(xr + q, pad_w, wt, b, k, g.relu, yr + q * k);
      q += 2;
    }
    if (g.ow - q >= 1) ForwardBlocks<KH, KW, 1>(xr + q, pad_w, wt, b, k, g.relu, yr + q * k);
  }
}

// A row of P output pixels (P even) of 16 channels for two output rows,
// ReLU'd, then max-pooled in 2x2 windows: writes P/2 pooled vectors to `y`
// (stride k) and, per window, the four 16-lane masks of the input that won
// and is positive, to `masks` (stride 4 * groups). Strict '>' in raster
// order keeps the first maximum, as Pool2dPlan does, and after the ReLU no
// value is NaN, so both pick the same winner.
// P output pixels (P even) of 16 channels in two output rows, ReLU'd, then
// max-pooled in 2x2 windows: writes P/2 pooled vectors to `y` (stride k)
// and, per window, four 16-lane masks to `masks` (stride mask_stride): for
// each corner in raster order, the channels where that input won and is
// positive. Strict '>' in raster order keeps the first maximum, as
// Pool2dPlan does; after the ReLU no value is NaN, so both pick the same.
template <int KH, int KW, int P>
YOKE_AVX512 inline void PooledBlock(const float* xp, int64_t pad_w, const float* wt, int64_t k,
                                    __m512 bias, float* y, uint16_t* masks, int64_t mask_stride) {
  static_assert(P % 2 == 0, "a block covers whole windows");
  __m512 acc[P], top[P / 2];
  __mmask16 top_right[P / 2];
  ConvRow<KH, KW, P>(xp, pad_w, wt, k, bias, /*relu=*/true, acc);
#pragma GCC unroll 8
  for (int q = 0; q < P / 2; ++q) {
    top_right[q] = _mm512_cmp_ps_mask(acc[2 * q + 1], acc[2 * q], _CMP_GT_OQ);
    top[q] = _mm512_mask_blend_ps(top_right[q], acc[2 * q], acc[2 * q + 1]);
  }
  ConvRow<KH, KW, P>(xp + pad_w, pad_w, wt, k, bias, /*relu=*/true, acc);
#pragma GCC unroll 8
  for (int q = 0; q < P / 2; ++q) {
    const __mmask16 right = _mm512_cmp_ps_mask(acc[2 * q + 1], acc[2 * q], _CMP_GT_OQ);
    const __m512 bottom = _mm512_mask_blend_ps(right, acc[2 * q], acc[2 * q + 1]);
    const __mmask16 below = _mm512_cmp_ps_mask(bottom, top[q], _CMP_GT_OQ);
    const __m512 out = _mm512_mask_blend_ps(below, top[q], bottom);
    _mm512_storeu_ps(y + q * k, out);
    const __mmask16 live = _mm512_cmp_ps_mask(out, _mm512_setzero_ps(), _CMP_GT_OQ);
    uint16_t* m = masks + q * mask_stride;
    m[0] = static_cast<uint16_t>(live & ~below & ~top_right[q]);
    m[1] = static_cast<uint16_t>(live & ~below & top_right[q]);
    m[2] = static_cast<uint16_t>(live & below & ~right);
    m[3] = static_cast<uint16_t>(live & below & right);
  }
}

template <int KH, int KW, int P>
YOKE_AVX512 void PooledBlocks(const float* xp, int64_t pad_w, const float* wt, const float* b,
                              int64_t k, float* y, uint16_t* masks) {
  const int64_t groups = k / kLanes;
  for (int64_t grp = 0; grp < groups; ++grp) {
    const __m512 bias = b != nullptr ? _mm512_loadu_ps(b + grp * kLanes) : _mm512_setzero_ps();
    PooledBlock<KH, KW, P>(xp, pad_w, wt + grp * kLanes, k, bias, y + grp * kLanes, masks + grp * 4,
                           groups * 4);
  }
}

// One image's pooled output yi: (OH/2, OW/2, K), and its masks:
// (OH/2, OW/2, K/16, 4). A last odd output row or column is never computed:
// no window reads it.
template <int KH, int KW>
YOKE_AVX512 void PooledImage(const Conv2dGeometry& g, const float* pad, const float* wt,
                             const float* b, float* yi, uint16_t* mi) {
  const int64_t pad_w = g.ow + KW - 1, k = g.k, groups = k / kLanes;
  const int64_t ph = g.oh / 2, pw = g.ow / 2;
  for (int64_t r = 0; r < ph; ++r) {
    const float* xr = pad + 2 * r * pad_w;
    float* yr = yi + r * pw * k;
    uint16_t* mr = mi + r * pw * groups * 4;
    // Blocks of 14, 8, 4 and 2 output columns: 7, 4, 2 and 1 windows.
    int64_t q = 0;  // output column
    auto at = [&](int64_t col) {
      return std::make_pair(yr + col / 2 * k, mr + col / 2 * groups * 4);
    };
    for (; q + kMaxBlock <= 2 * pw; q += kMaxBlock) {
      auto [y, m] = at(q);
      PooledBlocks<KH, KW, kMaxBlock>(xr + q, pad_w, wt, b, k, y, m);
    }
    if (2 * pw - q >= 8) {
      auto [y, m] = at(q);
      PooledBlocks<KH, KW, 8>(xr + q, pad_w, wt, b, k, y, m);
      q += 8;
    }
    if (2 * pw - q >= 4) {
      auto [y, m] = at(q);
      PooledBlocks<KH, KW, 4>(xr + q, pad_w, wt, b, k, y, m);
      q += 4;
    }
    if (2 * pw - q >= 2) {
      auto [y, m] = at(q);
      PooledBlocks<KH, KW, 2>(xr + q, pad_w, wt, b, k, y, m);
    }
  }
}

// One output pixel's share of backward-weights for 16 channels: its
// gradient d times each tap's input (`xq`: the padded input at the pixel's
// first tap) into acc[tap], and d into the bias accumulator.
template <int KH, int KW>
YOKE_AVX512 __attribute__((always_inline)) inline void AccumulateTaps(const float* xq,
                                                                      int64_t pad_w, __m512 d,
                                                                      __m512* acc, __m512* accb) {
  *accb = _mm512_add_ps(*accb, d);
#pragma GCC unroll 8
  for (int i = 0; i < KH; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) {
      acc[i * KW + j] = _mm512_fmadd_ps(_mm512_set1_ps(xq[i * pad_w + j]), d, acc[i * KW + j]);
    }
  }
}

// One image's dw (KH*KW, K) and db (K) for 16 channels: an accumulator per
// tap and one for the bias, over every output pixel.
// GCC's predictive commoning would carry each input across the q loop (the
// tap (i, j+1) at q is the tap (i, j) at q+1) in scalars it then spills; a
// broadcast straight from memory per tap is faster.
template <int KH, int KW>
YOKE_AVX512 __attribute__((optimize("no-predictive-commoning"))) void BackwardWeightsImage(
    const Conv2dGeometry& g, const float* pad, const float* dyi, float* part) {
  constexpr int kTaps = KH * KW;
  const int64_t pad_w = g.ow + KW - 1, k = g.k;
  for (int64_t grp = 0; grp < k; grp += kLanes) {
    __m512 acc[kTaps];
#pragma GCC unroll 32
    for (int t = 0; t < kTaps; ++t) acc[t] = _mm512_setzero_ps();
    __m512 accb = _mm512_setzero_ps();
    for (int64_t r = 0; r < g.oh; ++r) {
      const float* xr = pad + r * pad_w;
      const float* dr = dyi + r * g.ow * k + grp;
      for (int64_t q = 0; q < g.ow; ++q) {
        const __m512 d = _mm512_loadu_ps(dr + q * k);
        AccumulateTaps<KH, KW>(xr + q, pad_w, d, acc, &accb);
      }
    }
#pragma GCC unroll 32
    for (int t = 0; t < kTaps; ++t) _mm512_storeu_ps(part + t * k + grp, acc[t]);
    _mm512_storeu_ps(part + kTaps * k + grp, accb);
  }
}

// BackwardWeightsImage for a pooled output: the gradient of output pixel
// (r, q) is its window's dy where the pixel won (and was positive), else
// zero, rebuilt in registers from the masks instead of read from a full-size
// gradient. The pixels are visited in BackwardWeightsImage's order, so the
// sums are bit for bit those of the unfused layers.
template <int KH, int KW>
YOKE_AVX512 __attribute__((optimize("no-predictive-commoning"))) void BackwardWeightsPooledImage(
    const Conv2dGeometry& g, const float* pad, const float* dyi, const uint16_t* mi, float* part) {
  constexpr int kTaps = KH * KW;
  const int64_t pad_w = g.ow + KW - 1, k = g.k, groups = k / kLanes;
  const int64_t ph = g.oh / 2, pw = g.ow / 2;
  for (int64_t grp = 0; grp < groups; ++grp) {
    __m512 acc[kTaps];
#pragma GCC unroll 32
    for (int t = 0; t < kTaps; ++t) acc[t] = _mm512_setzero_ps();
    __m512 accb = _mm512_setzero_ps();
    for (int64_t r = 0; r < 2 * ph; ++r) {
      const float* xr = pad + r * pad_w;
      const float* dr = dyi + (r / 2) * pw * k + grp * kLanes;
      const uint16_t* mr = mi + ((r / 2) * pw * groups + grp) * 4 + (r % 2) * 2;
      for (int64_t c = 0; c < pw; ++c) {
        const __m512 dv = _mm512_loadu_ps(dr + c * k);
        const uint16_t* m = mr + c * groups * 4;
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          // dy + 0.0f, as the pool's backward writes it (-0.0 becomes +0.0).
          const __m512 d = _mm512_maskz_add_ps(m[h], dv, _mm512_setzero_ps());
          AccumulateTaps<KH, KW>(xr + 2 * c + h, pad_w, d, acc, &accb);
        }
      }
    }
#pragma GCC unroll 32
    for (int t = 0; t < kTaps; ++t) _mm512_storeu_ps(part + t * k + grp * kLanes, acc[t]);
    _mm512_storeu_ps(part + kTaps * k + grp * kLanes, accb);
  }
}

template <int KH, int KW>
void ForwardAll(const Conv2dGeometry& g, const float* x, const float* wt, const float* b,
                float* pads, int64_t pad_size, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < g.n; ++i) {
    float* pad = pads + omp_get_thread_num() * pad_size;
    PadImage(g, x, i, pad);
    ForwardImage<KH, KW>(g, pad, wt, b, y + i * g.oh * g.ow * g.k);
  }
}

template <int KH, int KW>
void PooledAll(const Conv2dGeometry& g, const float* x, const float* wt, const float* b,
               float* pads, int64_t pad_size, float* y, uint16_t* masks) {
  const int64_t per_image = (g.oh / 2) * (g.ow / 2) * g.k;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < g.n; ++i) {
    float* pad = pads + omp_get_thread_num() * pad_size;
    PadImage(g, x, i, pad);
    PooledImage<KH, KW>(g, pad, wt, b, y + i * per_image, masks + i * per_image / 4);
  }
}

template <int KH, int KW>
void BackwardWeightsAll(const Conv2dGeometry& g, const float* x, const float* dy,
                        const uint16_t* masks, float* pads, int64_t pad_size, float* partial) {
  const int64_t per_image = (KH * KW + 1) * g.k;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < g.n; ++i) {
    float* pad = pads + omp_get_thread_num() * pad_size;
    PadImage(g, x, i, pad);
    if (g.pool) {
      const int64_t pooled = (g.oh / 2) * (g.ow / 2) * g.k;
      BackwardWeightsPooledImage<KH, KW>(g, pad, dy + i * pooled, masks + i * pooled / 4,
                                         partial + i * per_image);
    } else {
      BackwardWeightsImage<KH, KW>(g, pad, dy + i * g.oh * g.ow * g.k, partial + i * per_image);
    }
  }
}

}  // namespace

bool SingleChannelConv::Supported(const Conv2dGeometry& g) {
  if (g.pool && (!g.relu || g.oh < 2 || g.ow < 2)) return false;
  return g.c == 1 && g.k > 0 && g.k % kLanes == 0 && g.stride_h == 1 && g.stride_w == 1 &&
         g.kh == g.kw && (g.kh == 3 || g.kh == 5) && g.n > 0 && g.oh > 0 && g.ow > 0 &&
         __builtin_cpu_supports("avx512f");
}

float* SingleChannelConv::PaddedBuffer(int threads) {
  const size_t size = static_cast<size_t>((g_.oh + g_.kh - 1) * (g_.ow + g_.kw - 1));
  if (padded_.size() < size * threads) padded_.resize(size * threads);
  return padded_.data();
}

void SingleChannelConv::Forward(const float* x, const float* w, const float* b, float* y) {
  // (K, KH, KW, 1) -> (KH*KW, K).
  const int64_t taps = g_.kh * g_.kw, k = g_.k;
  wt_.resize(taps * k);
  for (int64_t f = 0; f < k; ++f) {
    for (int64_t t = 0; t < taps; ++t) wt_[t * k + f] = w[f * taps + t];
  }
  const int64_t pad_size = (g_.oh + g_.kh - 1) * (g_.ow + g_.kw - 1);
  float* pads = PaddedBuffer(omp_get_max_threads());
  const float* bias = g_.bias ? b : nullptr;
  if (g_.pool) {
    // 16 channels per mask, 4 masks per window: a quarter of the pooled size.
    masks_.resize(g_.n * (g_.oh / 2) * (g_.ow / 2) * k / 4);
    if (g_.kh == 3) {
      PooledAll<3, 3>(g_, x, wt_.data(), bias, pads, pad_size, y, masks_.data());
    } else {
      PooledAll<5, 5>(g_, x, wt_.data(), bias, pads, pad_size, y, masks_.data());
    }
  } else if (g_.kh == 3) {
    ForwardAll<3, 3>(g_, x, wt_.data(), bias, pads, pad_size, y);
  } else {
    ForwardAll<5, 5>(g_, x, wt_.data(), bias, pads, pad_size, y);
  }
}

void SingleChannelConv::BackwardWeights(const float* x, const float* dy, float* dw, float* db) {
  const int64_t taps = g_.kh * g_.kw, k = g_.k, per_image = (taps + 1) * k;
  partial_.resize(g_.n * per_image);
  const int64_t pad_size = (g_.oh + g_.kh - 1) * (g_.ow + g_.kw - 1);
  float* pads = PaddedBuffer(omp_get_max_threads());
  if (g_.kh == 3) {
    BackwardWeightsAll<3, 3>(g_, x, dy, masks_.data(), pads, pad_size, partial_.data());
  } else {
    BackwardWeightsAll<5, 5>(g_, x, dy, masks_.data(), pads, pad_size, partial_.data());
  }
  // Images summed in order: the same bits for any thread count.
  float* sum = partial_.data();
  for (int64_t i = 1; i < g_.n; ++i) {
    const float* p = partial_.data() + i * per_image;
    for (int64_t e = 0; e < per_image; ++e) sum[e] += p[e];
  }
  for (int64_t f = 0; f < k; ++f) {
    for (int64_t t = 0; t < taps; ++t) dw[f * taps + t] = sum[t * k + f];
  }
  if (g_.bias) {
    for (int64_t f = 0; f < k; ++f) db[f] = sum[taps * k + f];
  }
}

}  // namespace yoke::engine::cpu
