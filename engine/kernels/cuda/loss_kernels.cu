#include "common/status.h"
#include "engine/kernels/cuda/for_each.cuh"
#include "engine/kernels/cuda/loss_kernels.h"

namespace yoke::engine::cuda {

absl::Status LaunchSoftmaxXent(const SoftmaxXentRowFn& f, int64_t rows, const LossTotalsFn& totals,
                               cudaStream_t stream) {
  RETURN_IF_ERROR(LaunchForEach("cuda::SoftmaxXentRows", rows, f, stream));
  return LaunchForEach("cuda::LossTotals", 1, totals, stream);
}

absl::Status LaunchMse(const MseRowFn& f, int64_t rows, const LossTotalsFn& totals,
                       cudaStream_t stream) {
  RETURN_IF_ERROR(LaunchForEach("cuda::MseRows", rows, f, stream));
  return LaunchForEach("cuda::LossTotals", 1, totals, stream);
}

}  // namespace yoke::engine::cuda
