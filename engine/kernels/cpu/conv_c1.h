// Direct convolution for one input channel: a network's first layer on
// grayscale images, where oneDNN 2.6 is least efficient.
//
// With C = 1 each output pixel is a dot product of KH*KW inputs, too thin
// for oneDNN's kernels, which block over input channels: the zoo CNN's first
// convolution (5x5, 1->32 on 28x28, batch 64) ran at about half of the
// machine's FLOP rate through them. Here the output channels are the vector
// lanes: a block of output pixels keeps one AVX-512 accumulator per pixel
// and 16 channels, and every tap is a broadcast of one input times a row of
// 16 weights. Backward-weights keeps one accumulator per tap (and one for the
// bias) over an image, then sums the images' partials in a fixed order, so
// its result does not depend on the thread count.
//
// With g.pool (conv.h), Forward also takes the ReLU'd output's 2x2 maxima
// in registers and writes only them, with a 16-bit winner mask per window,
// corner and 16 channels; BackwardWeights rebuilds each output pixel's
// gradient from the pooled gradient and those masks. The full-size
// activation and its gradient never reach memory: for the zoo CNN that is
// four passes over 6.4 MB per step, and the pool layer's own two passes.
//
// The kernels run when Supported(g): C = 1, K a multiple of 16, stride 1,
// a 3x3 or 5x5 window, a CPU with AVX-512F, and with g.pool a ReLU and an
// output of at least 2x2. Conv2dPlan falls back to oneDNN otherwise (and
// refuses g.pool). Inputs are zero-padded into a per-thread buffer, so any
// padding works.
//
// Thread-safety: one object belongs to one Conv2dPlan; not thread-safe.
#ifndef YOKE_ENGINE_KERNELS_CPU_CONV_C1_H_
#define YOKE_ENGINE_KERNELS_CPU_CONV_C1_H_

#include <cstdint>
#include <vector>

#include "engine/kernels/cpu/conv.h"

namespace yoke::engine::cpu {

class SingleChannelConv {
 public:
  static bool Supported(const Conv2dGeometry& g);
  // Requires Supported(g).
  explicit SingleChannelConv(const Conv2dGeometry& g) : g_(g) {}

  // Same contracts as Conv2dPlan::Forward and BackwardWeights (conv.h),
  // including the fused ReLU of g.relu and the fused pool of g.pool.
  void Forward(const float* x, const float* w, const float* b, float* y);
  void BackwardWeights(const float* x, const float* dy, float* dw, float* db);

 private:
  // Per-thread zero-padded copies of one image, sized for `threads`.
  float* PaddedBuffer(int threads);

  Conv2dGeometry g_;
  std::vector<float> wt_;       // weights as (KH*KW, K): a tap's K weights are contiguous
  std::vector<float> padded_;   // threads x (OH+KH-1) x (OW+KW-1)
  std::vector<float> partial_;  // N x (KH*KW + 1) x K: per-image dw and db
  // g.pool: (N, OH/2, OW/2, K/16, 4) winner masks of the last Forward, one bit
  // per channel, for the window's corners in raster order; a bit is set when
  // that input won and is positive (the ReLU passes its gradient).
  std::vector<uint16_t> masks_;
};

}  // namespace yoke::engine::cpu

#endif  // YOKE_ENGINE_KERNELS_CPU_CONV_C1_H_
