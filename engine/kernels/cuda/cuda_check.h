// CUDA runtime return codes -> absl::Status, at the lowest layer.
//
// Every CUDA runtime call that can fail goes through CUDA_RETURN_IF_ERROR, so
// a failure surfaces as a Status whose message holds the call text, the
// error name and description, and the file and line:
//   "cudaMemcpyAsync(dst, src, n, kind, s) failed: cudaErrorInvalidValue
//    (invalid argument) at engine/kernels/cuda/foo.cu:42"
// Codes: an unavailable device or driver maps to UNAVAILABLE, out of memory
// to RESOURCE_EXHAUSTED, everything else to INTERNAL.
//
// Header-only; include it only from code compiled with the CUDA headers: the
// kernels here, and collective/'s NCCL backend. cuBLAS has its own macro in
// cublas_check.h next to this file, NCCL in collective/nccl/nccl_check.h.
// Thread-safe (pure functions).
#ifndef YOKE_ENGINE_KERNELS_CUDA_CUDA_CHECK_H_
#define YOKE_ENGINE_KERNELS_CUDA_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace yoke::engine::cuda {

// OK for cudaSuccess; otherwise the Status described above.
inline absl::Status CudaErrorToStatus(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(call, " failed: ", cudaGetErrorName(e), " (",
                                 cudaGetErrorString(e), ") at ", file, ":", line);
  switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::UnavailableError(msg);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace yoke::engine::cuda

// The converted Status of `call` (OK on cudaSuccess), for code that must not
// return at once (constructors, cleanup).
#define CUDA_STATUS(call) ::yoke::engine::cuda::CudaErrorToStatus((call), #call, __FILE__, __LINE__)

// Returns the converted Status from the enclosing function if `call` fails.
#define CUDA_RETURN_IF_ERROR(call)                                                  \
  do {                                                                              \
    ::absl::Status _yoke_cuda_status =                                              \
        ::yoke::engine::cuda::CudaErrorToStatus((call), #call, __FILE__, __LINE__); \
    if (!_yoke_cuda_status.ok()) return _yoke_cuda_status;                          \
  } while (0)

// After a kernel launch: checks the launch itself (bad configuration, no
// device) without synchronising, so execution stays asynchronous.
#define CUDA_RETURN_IF_LAUNCH_FAILED(kernel)                                      \
  do {                                                                            \
    ::absl::Status _yoke_launch_status = ::yoke::engine::cuda::CudaErrorToStatus( \
        cudaGetLastError(), "launch of " #kernel, __FILE__, __LINE__);            \
    if (!_yoke_launch_status.ok()) return _yoke_launch_status;                    \
  } while (0)

#endif  // YOKE_ENGINE_KERNELS_CUDA_CUDA_CHECK_H_
