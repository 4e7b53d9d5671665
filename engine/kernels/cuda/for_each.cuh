// LaunchForEach: runs a per-element functor (math/hd.h) on the device, f(i)
// for every i in [0, n), one thread per i in a grid-stride loop.
//
// Include only from .cu files. The launch is checked without synchronising
// (execution errors surface at the next synchronising call, with the
// kernel's name in the launch error). n == 0 launches nothing; n < 0 is
// INVALID_ARGUMENT.
#ifndef YOKE_ENGINE_KERNELS_CUDA_FOR_EACH_CUH_
#define YOKE_ENGINE_KERNELS_CUDA_FOR_EACH_CUH_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda/cuda_check.h"

namespace yoke::engine::cuda {

constexpr int kForEachThreads = 256;
// Enough blocks to fill an H100 (132 SMs x 8 resident blocks of 256); larger
// n loops inside the grid.
constexpr int64_t kForEachMaxBlocks = 4096;

template <typename F>
__global__ void ForEachKernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    f(i);
  }
}

// The grid LaunchForEach uses for n elements (n > 0).
inline int ForEachBlocks(int64_t n) {
  return static_cast<int>(
      std::min<int64_t>((n + kForEachThreads - 1) / kForEachThreads, kForEachMaxBlocks));
}

template <typename F>
absl::Status LaunchForEach(const char* what, int64_t n, const F& f, cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": n must be >= 0, got ", n));
  if (n == 0) return absl::OkStatus();
  ForEachKernel<F><<<ForEachBlocks(n), kForEachThreads, 0, stream>>>(n, f);
  return CudaErrorToStatus(cudaGetLastError(), what, __FILE__, __LINE__);
}

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_FOR_EACH_CUH_
