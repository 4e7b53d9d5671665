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
  const int64_t partials = NormPartials(n);
  RETURN_IF_ERROR(LaunchForEach("cuda::SumSquaresPartials", partials,
                                SumSquaresChunkFn{g, n, partials, partial}, stream));
  return LaunchForEach("cuda::SumSquaresTotal", 1, SumChunksFn{partial, partials, out}, stream);
}

}  // namespace yoke::engine::cuda
