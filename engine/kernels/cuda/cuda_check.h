// CUDA and cuBLAS return codes -> absl::Status, at the lowest layer.
//
// Every CUDA runtime or cuBLAS call that can fail goes through one of these
// macros, so a failure surfaces as a Status whose message holds the call
// text, the library's error name and description, and the file and line:
//   "cudaMemcpyAsync(dst, src, n, kind, s) failed: cudaErrorInvalidValue
//    (invalid argument) at engine/kernels/cuda/foo.cu:42"
// Codes: an unavailable device or driver maps to UNAVAILABLE, out of memory
// to RESOURCE_EXHAUSTED, everything else to INTERNAL.
//
// Header-only; for host code in .cc and .cu files. Thread-safe (pure functions).
#ifndef YOKE_ENGINE_KERNELS_CUDA_CUDA_CHECK_H_
#define YOKE_ENGINE_KERNELS_CUDA_CUDA_CHECK_H_

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace yoke::cuda {

// OK for cudaSuccess; otherwise the Status described above.
inline absl::Status CudaErrorToStatus(cudaError_t e, const char* call, const char* file,
                                      int line) {
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

// OK for CUBLAS_STATUS_SUCCESS; otherwise the Status described above.
inline absl::Status CublasErrorToStatus(cublasStatus_t s, const char* call, const char* file,
                                        int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg = absl::StrCat(call, " failed: ", cublasGetStatusName(s), " (",
                                 cublasGetStatusString(s), ") at ", file, ":", line);
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (s == CUBLAS_STATUS_NOT_INITIALIZED) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

}  // namespace yoke::cuda

// Returns the converted Status from the enclosing function if `call` fails.
#define CUDA_RETURN_IF_ERROR(call)                                                \
  do {                                                                            \
    ::absl::Status _yoke_cuda_status =                                            \
        ::yoke::cuda::CudaErrorToStatus((call), #call, __FILE__, __LINE__);       \
    if (!_yoke_cuda_status.ok()) return _yoke_cuda_status;                        \
  } while (0)

#define CUBLAS_RETURN_IF_ERROR(call)                                              \
  do {                                                                            \
    ::absl::Status _yoke_cublas_status =                                          \
        ::yoke::cuda::CublasErrorToStatus((call), #call, __FILE__, __LINE__);     \
    if (!_yoke_cublas_status.ok()) return _yoke_cublas_status;                    \
  } while (0)

// After a kernel launch: checks the launch itself (bad configuration, no
// device) without synchronising, so execution stays asynchronous.
#define CUDA_RETURN_IF_LAUNCH_FAILED(kernel)                                       \
  do {                                                                            \
    ::absl::Status _yoke_launch_status = ::yoke::cuda::CudaErrorToStatus(         \
        cudaGetLastError(), "launch of " #kernel, __FILE__, __LINE__);            \
    if (!_yoke_launch_status.ok()) return _yoke_launch_status;                    \
  } while (0)

#endif  // YOKE_ENGINE_KERNELS_CUDA_CUDA_CHECK_H_
