// Launchers of the explicit-padding kernels (math/conv_pad.h). Enqueue on
// ctx->stream() without synchronising; pointers are device memory.
//
// Thread-safety: as DeviceContext.
#ifndef YOKE_ENGINE_KERNELS_CUDA_CONV_PAD_H_
#define YOKE_ENGINE_KERNELS_CUDA_CONV_PAD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/kernels/cuda/device_context.h"

namespace yoke::engine::cuda {

// xp (n, hp, wp, c) = x (n, h, w, c) with zero bottom rows and right columns.
absl::Status PadBottomRight(DeviceContext* ctx, const float* x, float* xp, int64_t n, int64_t h,
                            int64_t w, int64_t c, int64_t hp, int64_t wp);
// dx (n, h, w, c) = the top-left part of dxp (n, hp, wp, c).
absl::Status CropBottomRight(DeviceContext* ctx, const float* dxp, float* dx, int64_t n, int64_t h,
                             int64_t w, int64_t c, int64_t hp, int64_t wp);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_CONV_PAD_H_
