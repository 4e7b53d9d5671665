// When an element-wise CPU loop runs as an OpenMP parallel region.
#ifndef YOKE_ENGINE_KERNELS_CPU_PARALLEL_H_
#define YOKE_ENGINE_KERNELS_CPU_PARALLEL_H_

#include <cstdint>

namespace yoke::engine {

// Below this many elements a parallel region costs more than the loop it
// splits (measured on the element-wise layers and optimizers).
inline constexpr int64_t kParallelThreshold = 32768;

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_KERNELS_CPU_PARALLEL_H_
