// Launchers of the CUDA kernels behind the activation, add, flatten,
// global_avg_pool, pool2d, dropout and softmax layers
// (engine/layers/cuda/). Each runs the per-element functor of
// engine/kernels/cuda/math/<op>.h with LaunchForEach; the host tests of
// those headers compare the functors with the CPU layers.
//
// Every launcher enqueues its work on `stream` and returns the launch's
// Status without synchronising (execution errors surface at the next
// synchronising call). Pointers are device memory; counts are elements.
// n == 0 enqueues nothing.
//
// Thread-safety: stateless; ordering is the stream's.
#ifndef YOKE_ENGINE_KERNELS_CUDA_LAYER_KERNELS_H_
#define YOKE_ENGINE_KERNELS_CUDA_LAYER_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/cuda/math/activation.h"
#include "engine/kernels/cuda/math/dropout.h"
#include "engine/kernels/cuda/math/pool.h"

namespace yoke::engine::cuda {

// dst[0, bytes) = src[0, bytes), device to device.
absl::Status CopyOnStream(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// y = act(x) over n elements; y may be x.
absl::Status ActivationForward(ActKind kind, float alpha, const float* x, float* y, int64_t n,
                               cudaStream_t stream);
// dx = act'(x, y) dy over n elements (math/activation.h says which of x, y
// each kind reads).
absl::Status ActivationBackward(ActKind kind, float alpha, const float* x, const float* y,
                                const float* dy, float* dx, int64_t n, cudaStream_t stream);

// y = a + b over n elements.
absl::Status AddForward(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream);
// y += b over n elements.
absl::Status AddInPlace(float* y, const float* b, int64_t n, cudaStream_t stream);

// x: (n, hw, c) -> y: (n, c), the mean over hw; and its backward.
absl::Status GlobalAvgPoolForward(const float* x, float* y, int64_t n, int64_t hw, int64_t c,
                                  cudaStream_t stream);
absl::Status GlobalAvgPoolBackward(const float* dy, float* dx, int64_t n, int64_t hw, int64_t c,
                                   cudaStream_t stream);

// Pooling over g (math/pool.h). x: (N, H, W, C), y: (N, OH, OW, C); max
// pooling writes each output's winner to argmax (N*OH*OW*C int32), which
// its Backward reads. Backward overwrites all of dx.
absl::Status MaxPoolForward(const PoolGeom& g, const float* x, float* y, int32_t* argmax,
                            cudaStream_t stream);
absl::Status MaxPoolBackward(const PoolGeom& g, const int32_t* argmax, const float* dy, float* dx,
                             cudaStream_t stream);
absl::Status AvgPoolForward(const PoolGeom& g, const float* x, float* y, cudaStream_t stream);
absl::Status AvgPoolBackward(const PoolGeom& g, const float* dy, float* dx, cudaStream_t stream);

// Training dropout of n elements under draw d (math/dropout.h): y and the
// u8 mask (1 = kept); and its backward through that mask.
absl::Status DropoutForward(const DropoutDraw& d, const float* x, float* y, uint8_t* mask,
                            int64_t n, cudaStream_t stream);
absl::Status DropoutBackward(const uint8_t* mask, float scale, const float* dy, float* dx,
                             int64_t n, cudaStream_t stream);

// Softmax over rows of k (math/softmax.h): y = softmax(x) per row, and
// dx = y (dy - <y, dy>) per row.
absl::Status SoftmaxForward(const float* x, float* y, int64_t rows, int64_t k, cudaStream_t stream);
absl::Status SoftmaxBackward(const float* y, const float* dy, float* dx, int64_t rows, int64_t k,
                             cudaStream_t stream);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_LAYER_KERNELS_H_
