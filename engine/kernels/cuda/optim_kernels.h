// CUDA launchers of the optimizers' functors (math/optim.h).
//
// Each enqueues its kernels on `stream` and returns the launch's Status
// without synchronising. Pointers in the functors are device memory.
// n == 0 launches nothing.
//
// Thread-safety: stateless; ordering is the stream's.
#ifndef YOKE_ENGINE_KERNELS_CUDA_OPTIM_KERNELS_H_
#define YOKE_ENGINE_KERNELS_CUDA_OPTIM_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/cuda/math/optim.h"

namespace yoke::engine::cuda {

// f(i) for i in [0, n): one SGD / Adam step over the flat buffers.
absl::Status LaunchSgdStep(const SgdStepFn& f, int64_t n, cudaStream_t stream);
absl::Status LaunchAdamStep(const AdamStepFn& f, int64_t n, cudaStream_t stream);

// *out = sum over g[0, n) of double(g)^2, deterministically (two levels);
// partial: NormPartials(n) doubles of scratch. n == 0 writes nothing.
absl::Status LaunchSumSquares(const float* g, int64_t n, double* partial, double* out,
                              cudaStream_t stream);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_OPTIM_KERNELS_H_
