// Launchers of the activation, add, flatten-copy and global_avg_pool
// kernels (layer_kernels.h).
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/for_each.cuh"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/kernels/cuda/math/activation.h"
#include "engine/kernels/cuda/math/add.h"
#include "engine/kernels/cuda/math/arith.h"
#include "engine/kernels/cuda/math/global_avg_pool.h"

namespace yoke::engine::cuda {

absl::Status CopyOnStream(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0 || dst == src) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  return absl::OkStatus();
}

absl::Status ActivationForward(ActKind kind, float alpha, const float* x, float* y, int64_t n,
                               cudaStream_t stream) {
  switch (kind) {
    case ActKind::kRelu:
      return LaunchForEach("ReluForward", n, ActForwardFn<ActKind::kRelu>{x, y, alpha}, stream);
    case ActKind::kLeakyRelu:
      return LaunchForEach("LeakyReluForward", n, ActForwardFn<ActKind::kLeakyRelu>{x, y, alpha},
                           stream);
    case ActKind::kSigmoid:
      return LaunchForEach("SigmoidForward", n, ActForwardFn<ActKind::kSigmoid>{x, y, alpha},
                           stream);
    case ActKind::kTanh:
      return LaunchForEach("TanhForward", n, ActForwardFn<ActKind::kTanh>{x, y, alpha}, stream);
    case ActKind::kGelu:
      return LaunchForEach("GeluForward", n, ActForwardFn<ActKind::kGelu>{x, y, alpha}, stream);
  }
  return absl::InvalidArgumentError("ActivationForward: unknown kind");
}

absl::Status ActivationBackward(ActKind kind, float alpha, const float* x, const float* y,
                                const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  switch (kind) {
    case ActKind::kRelu:
      return LaunchForEach("ReluBackward", n, ActBackwardFn<ActKind::kRelu>{x, y, dy, dx, alpha},
                           stream);
    case ActKind::kLeakyRelu:
      return LaunchForEach("LeakyReluBackward", n,
                           ActBackwardFn<ActKind::kLeakyRelu>{x, y, dy, dx, alpha}, stream);
    case ActKind::kSigmoid:
      return LaunchForEach("SigmoidBackward", n,
                           ActBackwardFn<ActKind::kSigmoid>{x, y, dy, dx, alpha}, stream);
    case ActKind::kTanh:
      return LaunchForEach("TanhBackward", n, ActBackwardFn<ActKind::kTanh>{x, y, dy, dx, alpha},
                           stream);
    case ActKind::kGelu:
      return LaunchForEach("GeluBackward", n, ActBackwardFn<ActKind::kGelu>{x, y, dy, dx, alpha},
                           stream);
  }
  return absl::InvalidArgumentError("ActivationBackward: unknown kind");
}

absl::Status AddForward(const float* a, const float* b, float* y, int64_t n, cudaStream_t stream) {
  return LaunchForEach("AddForward", n, AddFn{a, b, y}, stream);
}

absl::Status AddInPlace(float* y, const float* b, int64_t n, cudaStream_t stream) {
  return LaunchForEach("AddInPlace", n, AddInPlaceFn{y, b}, stream);
}

absl::Status GlobalAvgPoolForward(const float* x, float* y, int64_t n, int64_t hw, int64_t c,
                                  cudaStream_t stream) {
  const float inv = 1.0f / static_cast<float>(hw);
  return LaunchForEach("GlobalAvgPoolForward", n * c, GapForwardFn{x, y, hw, c, inv}, stream);
}

absl::Status GlobalAvgPoolBackward(const float* dy, float* dx, int64_t n, int64_t hw, int64_t c,
                                   cudaStream_t stream) {
  const float inv = 1.0f / static_cast<float>(hw);
  return LaunchForEach("GlobalAvgPoolBackward", n * hw * c, GapBackwardFn{dy, dx, hw, c, inv},
                       stream);
}

}  // namespace yoke::engine::cuda
