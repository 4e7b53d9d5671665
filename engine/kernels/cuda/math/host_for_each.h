// Runs a per-element functor (math/hd.h) on the host: f(i) for every i in
// [0, n), in order. The device runs the same functor through LaunchForEach
// (for_each.cuh), one thread per i, in no particular order, so a functor
// must write only what its own i owns.
//
// For host tests of the kernels' functors; not a fast path.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_HOST_FOR_EACH_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_HOST_FOR_EACH_H_

#include <cstdint>

namespace yoke::engine::cuda {

template <typename F>
void HostForEach(int64_t n, const F& f) {
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_HOST_FOR_EACH_H_
