// Explicit padding for convolutions whose TensorFlow "same" padding is
// asymmetric (every stride-2 layer: the odd row/column goes to the bottom/
// right). The input is copied into a buffer with the extra bottom rows and
// right columns zero, and the convolution then runs with equal padding on
// both sides: pads (top, bottom) on H become (top, top) on H + bottom - top,
// which reads the same elements in the same places, so the output is the
// same. Backward-data runs on the padded geometry and is cropped back.
//
// Layout NHWC, row-major. Per-element functors (math/hd.h).
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_CONV_PAD_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_CONV_PAD_H_

#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

// xp (N, HP, WP, C) from x (N, H, W, C), HP >= H and WP >= W: x where it
// has an element, 0 in the added bottom rows and right columns. One i per
// element of xp.
struct PadBottomRightFn {
  const float* x;
  float* xp;
  int64_t h, w, c, hp, wp;
  YOKE_HD void operator()(int64_t i) const {
    const int64_t ch = i % c;
    const int64_t col = (i / c) % wp;
    const int64_t row = (i / (c * wp)) % hp;
    const int64_t n = i / (c * wp * hp);
    xp[i] = row < h && col < w ? x[((n * h + row) * w + col) * c + ch] : 0.0f;
  }
};

// dx (N, H, W, C) = the top-left (H, W) of dxp (N, HP, WP, C). One i per
// element of dx.
struct CropBottomRightFn {
  const float* dxp;
  float* dx;
  int64_t h, w, c, hp, wp;
  YOKE_HD void operator()(int64_t i) const {
    const int64_t ch = i % c;
    const int64_t col = (i / c) % w;
    const int64_t row = (i / (c * w)) % h;
    const int64_t n = i / (c * w * h);
    dx[i] = dxp[((n * hp + row) * wp + col) * c + ch];
  }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_CONV_PAD_H_
