// Launchers of the dropout and softmax kernels (layer_kernels.h,
// math/dropout.h, math/softmax.h).
#include "engine/kernels/cuda/for_each.cuh"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/kernels/cuda/math/dropout.h"
#include "engine/kernels/cuda/math/softmax.h"

namespace yoke::engine::cuda {

absl::Status DropoutForward(const DropoutDraw& d, const float* x, float* y, uint8_t* mask,
                            int64_t n, cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("DropoutForward: n < 0");
  return LaunchForEach("DropoutForward", (n + 3) / 4, DropoutForwardFn{d, x, y, mask, n}, stream);
}

absl::Status DropoutBackward(const uint8_t* mask, float scale, const float* dy, float* dx,
                             int64_t n, cudaStream_t stream) {
  return LaunchForEach("DropoutBackward", n, DropoutBackwardFn{mask, dy, dx, scale}, stream);
}

absl::Status SoftmaxForward(const float* x, float* y, int64_t rows, int64_t k,
                            cudaStream_t stream) {
  return LaunchForEach("SoftmaxForward", rows, SoftmaxForwardFn{x, y, k}, stream);
}

absl::Status SoftmaxBackward(const float* y, const float* dy, float* dx, int64_t rows, int64_t k,
                             cudaStream_t stream) {
  return LaunchForEach("SoftmaxBackward", rows, SoftmaxBackwardFn{y, dy, dx, k}, stream);
}

}  // namespace yoke::engine::cuda
