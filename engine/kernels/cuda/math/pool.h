// Per-element functors of max_pool2d and avg_pool2d over channels-last
// images, x: (N, H, W, C) -> y: (N, OH, OW, C), with the rules of the CPU
// kernels (engine/kernels/cpu/pool.cc):
//  - a window is clipped to the real input (padding never wins a max and is
//    not counted in an average);
//  - max pooling starts from the window's first real input and takes a
//    later one only when strictly greater (ties and NaNs keep the earlier),
//    recording the winner's spatial index (row * W + column) per output;
//  - average pooling sums the window's inputs row by row from 0.0f, then
//    multiplies by 1.0f / (count).
// Forward: one i per output element. Backward is a gather, one i per input
// element: it visits the windows that cover the input in the order the
// CPU's scatter does (output row, then column), adding dy where this input
// won (max) or dy * (1 / count) (average), from 0.0f. So every functor
// equals the CPU bit for bit (MulRn keeps the device from fusing the
// average's product into the sum). Each f(i) writes only element i.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_POOL_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_POOL_H_

#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"
#include "engine/kernels/cuda/math/round.h"

namespace yoke::engine::cuda {

// One pooling geometry, batch included; padding after (bottom/right) is
// implied by the clipping to H and W.
struct PoolGeom {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t kh = 2, kw = 2, sh = 2, sw = 2;
  int64_t pad_top = 0, pad_left = 0;
  int64_t oh = 0, ow = 0;
};

// The real input rows [*lo, *hi) of output row r (columns alike).
YOKE_HD inline void PoolWindow(int64_t r, int64_t s, int64_t pad, int64_t k, int64_t size,
                               int64_t* lo, int64_t* hi) {
  const int64_t a = r * s - pad;
  *lo = a > 0 ? a : 0;
  *hi = a + k < size ? a + k : size;
}

// The output rows [*lo, *hi) whose windows cover input row u.
YOKE_HD inline void PoolCovering(int64_t u, int64_t s, int64_t pad, int64_t k, int64_t out,
                                 int64_t* lo, int64_t* hi) {
  const int64_t a = u + pad - k + 1;  // the lowest window start that covers u
  *lo = a <= 0 ? 0 : (a + s - 1) / s;
  const int64_t h = (u + pad) / s + 1;
  *hi = h < out ? h : out;
}

// Splits output index i into (image, row, column, channel).
YOKE_HD inline void PoolSplit(int64_t i, int64_t rows, int64_t cols, int64_t c, int64_t* img,
                              int64_t* r, int64_t* q, int64_t* j) {
  *j = i % c;
  int64_t t = i / c;
  *q = t % cols;
  t /= cols;
  *r = t % rows;
  *img = t / rows;
}

// i in [0, N*OH*OW*C): y[i] = the window's max, argmax[i] its position.
struct MaxPoolForwardFn {
  PoolGeom g;
  const float* x;
  float* y;
  int32_t* argmax;
  YOKE_HD void operator()(int64_t i) const {
    int64_t img, r, q, j, r0, r1, q0, q1;
    PoolSplit(i, g.oh, g.ow, g.c, &img, &r, &q, &j);
    PoolWindow(r, g.sh, g.pad_top, g.kh, g.h, &r0, &r1);
    PoolWindow(q, g.sw, g.pad_left, g.kw, g.w, &q0, &q1);
    const float* xi = x + img * g.h * g.w * g.c + j;
    const int64_t first = r0 * g.w + q0;
    float best = xi[first * g.c];
    int64_t arg = first;
    for (int64_t u = r0; u < r1; ++u) {
      for (int64_t v = q0; v < q1; ++v) {
        const float val = xi[(u * g.w + v) * g.c];
        if (val > best) best = val, arg = u * g.w + v;
      }
    }
    y[i] = best;
    argmax[i] = static_cast<int32_t>(arg);
  }
};

// i in [0, N*OH*OW*C): y[i] = the mean of the window's real inputs.
struct AvgPoolForwardFn {
  PoolGeom g;
  const float* x;
  float* y;
  YOKE_HD void operator()(int64_t i) const {
    int64_t img, r, q, j, r0, r1, q0, q1;
    PoolSplit(i, g.oh, g.ow, g.c, &img, &r, &q, &j);
    PoolWindow(r, g.sh, g.pad_top, g.kh, g.h, &r0, &r1);
    PoolWindow(q, g.sw, g.pad_left, g.kw, g.w, &q0, &q1);
    const float* xi = x + img * g.h * g.w * g.c + j;
    float sum = 0.0f;
    for (int64_t u = r0; u < r1; ++u) {
      for (int64_t v = q0; v < q1; ++v) sum += xi[(u * g.w + v) * g.c];
    }
    y[i] = sum * (1.0f / static_cast<float>((r1 - r0) * (q1 - q0)));
  }
};

// i in [0, N*H*W*C): dx[i] = the sum of dy over the windows this input won.
struct MaxPoolBackwardFn {
  PoolGeom g;
  const int32_t* argmax;
  const float* dy;
  float* dx;
  YOKE_HD void operator()(int64_t i) const {
    int64_t img, u, v, j, r0, r1, q0, q1;
    PoolSplit(i, g.h, g.w, g.c, &img, &u, &v, &j);
    PoolCovering(u, g.sh, g.pad_top, g.kh, g.oh, &r0, &r1);
    PoolCovering(v, g.sw, g.pad_left, g.kw, g.ow, &q0, &q1);
    const int32_t pos = static_cast<int32_t>(u * g.w + v);
    float sum = 0.0f;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t o = ((img * g.oh + r) * g.ow + q) * g.c + j;
        if (argmax[o] == pos) sum += dy[o];
      }
    }
    dx[i] = sum;
  }
};

// i in [0, N*H*W*C): dx[i] = sum over covering windows of dy / count.
struct AvgPoolBackwardFn {
  PoolGeom g;
  const float* dy;
  float* dx;
  YOKE_HD void operator()(int64_t i) const {
    int64_t img, u, v, j, r0, r1, q0, q1;
    PoolSplit(i, g.h, g.w, g.c, &img, &u, &v, &j);
    PoolCovering(u, g.sh, g.pad_top, g.kh, g.oh, &r0, &r1);
    PoolCovering(v, g.sw, g.pad_left, g.kw, g.ow, &q0, &q1);
    float sum = 0.0f;
    for (int64_t r = r0; r < r1; ++r) {
      int64_t a0, a1;
      PoolWindow(r, g.sh, g.pad_top, g.kh, g.h, &a0, &a1);
      for (int64_t q = q0; q < q1; ++q) {
        int64_t b0, b1;
        PoolWindow(q, g.sw, g.pad_left, g.kw, g.w, &b0, &b1);
        const float inv = 1.0f / static_cast<float>((a1 - a0) * (b1 - b0));
        sum += MulRn(dy[((img * g.oh + r) * g.ow + q) * g.c + j], inv);
      }
    }
    dx[i] = sum;
  }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_POOL_H_
