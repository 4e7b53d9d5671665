// Output size and padding of one spatial dimension of a window op (conv2d,
// max/avg pooling), with TensorFlow's "same" and "valid" conventions.
//
//   same:  out = ceil(in / stride); total padding
//          max((out - 1) * stride + window - in, 0), split floor/ceil with the
//          larger half after (bottom/right).
//   valid: out = floor((in - window) / stride) + 1 (< 1 when the window does not
//          fit); no padding. Trailing rows no window reaches are ignored.
#ifndef YOKE_ENGINE_KERNELS_CPU_PADDING_H_
#define YOKE_ENGINE_KERNELS_CPU_PADDING_H_

#include <algorithm>
#include <cstdint>

namespace yoke::engine::cpu {

struct Padding1d {
  int64_t out = 0;     // output size
  int64_t before = 0;  // zero rows before (top/left)
  int64_t after = 0;   // zero rows after (bottom/right)
};

inline Padding1d ComputePadding(int64_t in, int64_t window, int64_t stride, bool same) {
  Padding1d p;
  if (same) {
    p.out = (in + stride - 1) / stride;
    int64_t total = std::max<int64_t>((p.out - 1) * stride + window - in, 0);
    p.before = total / 2;
    p.after = total - p.before;
  } else {
    p.out = in >= window ? (in - window) / stride + 1 : 0;
  }
  return p;
}

}  // namespace yoke::engine::cpu

#endif  // YOKE_ENGINE_KERNELS_CPU_PADDING_H_
