// cuBLAS return codes -> absl::Status, at the lowest layer, as cuda_check.h
// does for the CUDA runtime:
//   "cublasSgemm(...) failed: CUBLAS_STATUS_ALLOC_FAILED (resource allocation
//    failed) at engine/kernels/cuda/foo.cu:42"
// Codes: an allocation failure maps to RESOURCE_EXHAUSTED, an uninitialised
// library to UNAVAILABLE, everything else to INTERNAL.
//
// Header-only; for host code in .cc and .cu files. Thread-safe (pure functions).
#ifndef YOKE_ENGINE_KERNELS_CUDA_CUBLAS_CHECK_H_
#define YOKE_ENGINE_KERNELS_CUDA_CUBLAS_CHECK_H_

#include <cublas_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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
#define CUBLAS_RETURN_IF_ERROR(call)                                                  \
  do {                                                                                \
    ::absl::Status _yoke_cublas_status =                                              \
        ::yoke::engine::cuda::CublasErrorToStatus((call), #call, __FILE__, __LINE__); \
    if (!_yoke_cublas_status.ok()) return _yoke_cublas_status;                        \
  } while (0)

#endif  // YOKE_ENGINE_KERNELS_CUDA_CUBLAS_CHECK_H_
