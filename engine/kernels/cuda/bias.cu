#include "absl/status/statusor.h"
#include "engine/kernels/cuda/bias.h"
#include "engine/kernels/cuda/for_each.cuh"
#include "engine/kernels/cuda/math/bias.h"

namespace yoke::engine::cuda {

absl::Status BiasAdd(DeviceContext* ctx, float* y, const float* b, int64_t rows, int64_t cols) {
  return LaunchForEach("cuda::BiasAdd", rows * cols, BiasAddFn{y, b, cols}, ctx->stream());
}

absl::Status BiasGradient(DeviceContext* ctx, const float* dy, float* db, int64_t rows,
                          int64_t cols) {
  const int64_t chunks = BiasChunks(rows), chunk_rows = BiasChunkRows(rows);
  if (chunks == 1) {
    return LaunchForEach("cuda::BiasGradient", cols,
                         BiasPartialSumFn{dy, db, rows, cols, chunk_rows}, ctx->stream());
  }
  absl::StatusOr<void*> ws =
      ctx->Workspace(static_cast<size_t>(chunks * cols) * sizeof(float), "bias gradient");
  if (!ws.ok()) return ws.status();
  float* partial = static_cast<float*>(*ws);
  absl::Status s =
      LaunchForEach("cuda::BiasGradient (chunks)", chunks * cols,
                    BiasPartialSumFn{dy, partial, rows, cols, chunk_rows}, ctx->stream());
  if (!s.ok()) return s;
  return LaunchForEach("cuda::BiasGradient (sum)", cols, BiasChunkSumFn{partial, db, chunks, cols},
                       ctx->stream());
}

}  // namespace yoke::engine::cuda
