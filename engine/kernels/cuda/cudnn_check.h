// cuDNN return codes -> absl::Status, as cuda_check.h does for the runtime:
//   "cudnnCreate(&h) failed: CUDNN_STATUS_NOT_INITIALIZED at engine/...:42"
// Codes: an allocation failure maps to RESOURCE_EXHAUSTED, an uninitialised
// library (no usable GPU) to UNAVAILABLE, everything else to INTERNAL.
//
// Header-only; for host code compiled with the CUDA headers. Thread-safe.
#ifndef YOKE_ENGINE_KERNELS_CUDA_CUDNN_CHECK_H_
#define YOKE_ENGINE_KERNELS_CUDA_CUDNN_CHECK_H_

#include <cudnn.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace yoke::engine::cuda {

inline absl::Status CudnnErrorToStatus(cudnnStatus_t s, const char* call, const char* file,
                                       int line) {
  if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  std::string msg =
      absl::StrCat(call, " failed: ", cudnnGetErrorString(s), " at ", file, ":", line);
  if (s == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (s == CUDNN_STATUS_NOT_INITIALIZED) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

}  // namespace yoke::engine::cuda

#define CUDNN_RETURN_IF_ERROR(call)                                                  \
  do {                                                                               \
    ::absl::Status _yoke_cudnn_status =                                              \
        ::yoke::engine::cuda::CudnnErrorToStatus((call), #call, __FILE__, __LINE__); \
    if (!_yoke_cudnn_status.ok()) return _yoke_cudnn_status;                         \
  } while (0)

#endif  // YOKE_ENGINE_KERNELS_CUDA_CUDNN_CHECK_H_
