// NCCL return codes -> absl::Status, at the lowest layer (as
// engine/kernels/cuda/cuda_check.h does for the CUDA runtime).
//
//   NCCL_RETURN_IF_ERROR(ncclAllReduce(...));
// fails with "ncclAllReduce(...) failed: ncclUnhandledCudaError (unhandled
// cuda error (run with NCCL_DEBUG=INFO for details)) at file:line". Codes:
// a peer or network failure (ncclRemoteError, ncclSystemError) maps to
// UNAVAILABLE, bad arguments and usage to INVALID_ARGUMENT / FAILED_
// PRECONDITION, everything else to INTERNAL.
//
// Header-only; include it only from code compiled with the NCCL headers.
#ifndef YOKE_COLLECTIVE_NCCL_NCCL_CHECK_H_
#define YOKE_COLLECTIVE_NCCL_NCCL_CHECK_H_

#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace yoke::collective {

inline absl::Status NcclErrorToStatus(ncclResult_t r, const char* call, const char* file,
                                      int line) {
  if (r == ncclSuccess) return absl::OkStatus();
  std::string msg = absl::StrCat(call, " failed: ", ncclGetErrorString(r), " at ", file, ":", line);
  switch (r) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(msg);
    case ncclInvalidArgument:
      return absl::InvalidArgumentError(msg);
    case ncclInvalidUsage:
      return absl::FailedPreconditionError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace yoke::collective

#define NCCL_RETURN_IF_ERROR(call)                                                \
  do {                                                                            \
    ::absl::Status _yoke_nccl_status =                                            \
        ::yoke::collective::NcclErrorToStatus((call), #call, __FILE__, __LINE__); \
    if (!_yoke_nccl_status.ok()) return _yoke_nccl_status;                        \
  } while (0)

#endif  // YOKE_COLLECTIVE_NCCL_NCCL_CHECK_H_
