// CUDA launchers of batch_norm's sequences (math/batch_norm.h): each runs
// the sequence's functors with LaunchForEach on `stream`, in order, and
// returns the first launch error without synchronising. Buffers, parameters
// and tensors are device memory.
//
// Thread-safety: stateless; ordering is the stream's.
#ifndef YOKE_ENGINE_KERNELS_CUDA_BATCH_NORM_KERNELS_H_
#define YOKE_ENGINE_KERNELS_CUDA_BATCH_NORM_KERNELS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "engine/kernels/cuda/math/batch_norm.h"

namespace yoke::engine::cuda {

absl::Status LaunchBnForwardTraining(const BnBuffers& b, const BnParams& p, const float* x,
                                     float* y, cudaStream_t stream);
absl::Status LaunchBnForwardInference(const BnBuffers& b, const BnParams& p, const float* x,
                                      float* y, cudaStream_t stream);
// dx may be null.
absl::Status LaunchBnBackward(const BnBuffers& b, const BnParams& p, bool training, const float* x,
                              const float* dy, float* dx, float* dgamma, float* dbeta,
                              cudaStream_t stream);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_BATCH_NORM_KERNELS_H_
