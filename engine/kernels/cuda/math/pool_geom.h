// PoolGeom (math/pool.h) for a pooling layer's spec and input, with the
// padding rules the CPU Pool2dLayer uses (shapes::ComputePadding: "valid",
// or TensorFlow's "same", whose odd total puts the extra row/column after).
// Host-only (it reads the engine's shape rules); the CUDA pool layer and
// the host tests build their geometry here.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_POOL_GEOM_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_POOL_GEOM_H_

#include <cstdint>

#include "engine/kernels/cuda/math/pool.h"
#include "engine/shapes/layer_shapes.h"
#include "engine/tensor.h"

namespace yoke::engine::cuda {

// in: the per-example (H, W, C); n: the batch size.
inline PoolGeom MakePoolGeom(const Shape& in, int64_t n, int64_t size, int64_t stride, bool same) {
  const shapes::Padding1d ph = shapes::ComputePadding(in[0], size, stride, same);
  const shapes::Padding1d pw = shapes::ComputePadding(in[1], size, stride, same);
  PoolGeom g;
  g.n = n;
  g.h = in[0];
  g.w = in[1];
  g.c = in[2];
  g.kh = g.kw = size;
  g.sh = g.sw = stride;
  g.pad_top = ph.before;
  g.pad_left = pw.before;
  g.oh = ph.out;
  g.ow = pw.out;
  return g;
}

// Whether some window would hold only padding (the CPU plan refuses those).
inline bool PoolHasEmptyWindow(const Shape& in, int64_t size, int64_t stride, bool same) {
  const shapes::Padding1d ph = shapes::ComputePadding(in[0], size, stride, same);
  const shapes::Padding1d pw = shapes::ComputePadding(in[1], size, stride, same);
  return ph.before >= size || ph.after >= size || pw.before >= size || pw.after >= size;
}

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_POOL_GEOM_H_
