// CUDA and cuBLAS return codes -> absl::Status, at the lowest layer. The
// CUDA runtime half (CUDA_RETURN_IF_ERROR, CUDA_RETURN_IF_LAUNCH_FAILED) lives
// in common/cuda_check.h, shared with collective/'s NCCL backend; this header
// adds cuBLAS.
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

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"  // CudaErrorToStatus, CUDA_RETURN_IF_ERROR, ...

namespace yoke::engine::cuda {

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

}  // namespace yoke::engine::cuda

// Returns the converted Status from the enclosing function if `call` fails.
#define CUBLAS_RETURN_IF_ERROR(call)                                              \
  do {                                                                            \
    ::absl::Status _yoke_cublas_status =                                          \
        ::yoke::engine::cuda::CublasErrorToStatus((call), #call, __FILE__, __LINE__);     \
    if (!_yoke_cublas_status.ok()) return _yoke_cublas_status;                    \
  } while (0)

#endif  // YOKE_ENGINE_KERNELS_CUDA_CUDA_CHECK_H_
