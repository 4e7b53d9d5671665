#include "common/status.h"
#include "engine/kernels/cuda/for_each.cuh"
#include "engine/kernels/cuda/optim_kernels.h"

namespace yoke::engine::cuda {

absl::Status LaunchSgdStep(const SgdStepFn& f, int64_t n, cudaStream_t stream) {
  return LaunchForEach("cuda::SgdStep", n, f, stream);
}

absl::Status LaunchAdamStep(const AdamStepFn& f, int64_t n, cudaStream_t stream) {
  return LaunchForEach("cuda::AdamStep", n, f, stream);
}

absl::Status LaunchSumSquares(const float* g, int64_t n, double* partial, double* out,
                              cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  const int64_t chunks = NormChunks(n);
  RETURN_IF_ERROR(
      LaunchForEach("cuda::SumSquaresChunks", chunks, SumSquaresChunkFn{g, n, partial}, stream));
  return LaunchForEach("cuda::SumSquaresTotal", 1, SumChunksFn{partial, chunks, out}, stream);
}

}  // namespace yoke::engine::cuda
