// CUDA element-wise kernels: ReLU forward and the fused SGD-momentum update.
//
// Each launcher enqueues one kernel on `stream` and returns the launch's
// Status (it does not synchronise; execution errors surface at the next
// synchronising call). Pointers are device memory. Semantics match the CPU
// references exactly up to float rounding:
//   ReluForward     <-> ActivationLayer(kRelu)::Forward (engine/layers/activation.h)
//   SgdMomentumStep <-> SgdUpdate                        (engine/optim/sgd.h)
// n == 0 launches nothing and returns OK; n < 0 is INVALID_ARGUMENT.
//
// Thread-safety: launchers are stateless; ordering is the stream's.
#ifndef YOKE_ENGINE_KERNELS_CUDA_ELEMENTWISE_H_
#define YOKE_ENGINE_KERNELS_CUDA_ELEMENTWISE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace yoke::engine::cuda {

// x: (n,) -> y: (n,), y = max(x, 0). x and y may be the same buffer.
absl::Status ReluForward(const float* x, float* y, int64_t n, cudaStream_t stream);

// One SGD step over n elements with PyTorch semantics (see engine/optim/sgd.h):
//   g = grad + wd p;  v = momentum v + g;  p -= lr (nesterov ? g + momentum v : v)
// p, v: (n,) updated in place; grad: (n,). v may be null when momentum == 0.
absl::Status SgdMomentumStep(float* p, const float* grad, float* v, int64_t n, float lr,
                             float momentum, float weight_decay, bool nesterov,
                             cudaStream_t stream);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_ELEMENTWISE_H_
