// The CUDA side of the caching allocator (engine/caching_allocator.h): device
// memory from cudaMalloc/cudaFree, and one CachingAllocator per device for the
// whole process, so that a training step in steady state calls cudaMalloc
// never (CachingAllocatorStats::device_mallocs stops growing after step 1).
//
// Thread-safety: CudaAllocator() and the allocators it returns are
// thread-safe; each Malloc/Free switches to its device and back.
#ifndef YOKE_ENGINE_KERNELS_CUDA_CUDA_ALLOCATOR_H_
#define YOKE_ENGINE_KERNELS_CUDA_CUDA_ALLOCATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/caching_allocator.h"

namespace yoke::engine::cuda {

// cudaMalloc/cudaFree on device `index`. Malloc returns RESOURCE_EXHAUSTED on
// cudaErrorMemoryAllocation and the converted error otherwise (call text,
// file, line; cuda_check.h).
std::unique_ptr<DeviceMemory> NewCudaDeviceMemory(int index);

// The process's caching allocator for device `index`, created on first use.
// INVALID_ARGUMENT for an index outside [0, cudaGetDeviceCount()),
// UNAVAILABLE without a usable device.
absl::StatusOr<CachingAllocator*> CudaAllocator(int index);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_CUDA_ALLOCATOR_H_
