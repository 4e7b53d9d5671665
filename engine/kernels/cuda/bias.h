// CUDA bias kernels for dense and conv2d (functors in math/bias.h).
//
// Activations are row-major (rows, cols) with the channel last. Each
// launcher enqueues on ctx->stream() and does not synchronise. Pointers are
// device memory.
//
// Thread-safety: as DeviceContext (one replica thread per device).
#ifndef YOKE_ENGINE_KERNELS_CUDA_BIAS_H_
#define YOKE_ENGINE_KERNELS_CUDA_BIAS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/cuda/device_context.h"

namespace yoke::engine::cuda {

// y[r, c] += b[c].
absl::Status BiasAdd(DeviceContext* ctx, float* y, const float* b, int64_t rows, int64_t cols);

// db[c] = sum over r of dy[r, c] (overwritten), deterministic. Takes
// scratch from ctx->Workspace when rows exceed one chunk, so it must not
// run while another call of this layer uses the workspace.
absl::Status BiasGradient(DeviceContext* ctx, const float* dy, float* db, int64_t rows,
                          int64_t cols);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_BIAS_H_
