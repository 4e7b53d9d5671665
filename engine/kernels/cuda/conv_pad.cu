#include "engine/kernels/cuda/conv_pad.h"
#include "engine/kernels/cuda/for_each.cuh"
#include "engine/kernels/cuda/math/conv_pad.h"

namespace yoke::engine::cuda {

absl::Status PadBottomRight(DeviceContext* ctx, const float* x, float* xp, int64_t n, int64_t h,
                            int64_t w, int64_t c, int64_t hp, int64_t wp) {
  return LaunchForEach("cuda::PadBottomRight", n * hp * wp * c,
                       PadBottomRightFn{x, xp, h, w, c, hp, wp}, ctx->stream());
}

absl::Status CropBottomRight(DeviceContext* ctx, const float* dxp, float* dx, int64_t n, int64_t h,
                             int64_t w, int64_t c, int64_t hp, int64_t wp) {
  return LaunchForEach("cuda::CropBottomRight", n * h * w * c,
                       CropBottomRightFn{dxp, dx, h, w, c, hp, wp}, ctx->stream());
}

}  // namespace yoke::engine::cuda
