// CUDA launchers of the losses' functors (math/loss.h).
//
// Each enqueues its kernels on `stream` and returns the launch's Status
// without synchronising. Pointers in the functors are device memory.
//
// Thread-safety: stateless; ordering is the stream's.
#ifndef YOKE_ENGINE_KERNELS_CUDA_LOSS_KERNELS_H_
#define YOKE_ENGINE_KERNELS_CUDA_LOSS_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/cuda/math/loss.h"

namespace yoke::engine::cuda {

// The row functor over `rows` rows, then `totals` (one thread) over them.
absl::Status LaunchSoftmaxXent(const SoftmaxXentRowFn& f, int64_t rows, const LossTotalsFn& totals,
                               cudaStream_t stream);
absl::Status LaunchMse(const MseRowFn& f, int64_t rows, const LossTotalsFn& totals,
                       cudaStream_t stream);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_LOSS_KERNELS_H_
