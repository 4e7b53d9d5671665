// Launchers of the pooling kernels (layer_kernels.h, math/pool.h).
#include "engine/kernels/cuda/for_each.cuh"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/kernels/cuda/math/pool.h"

namespace yoke::engine::cuda {
namespace {
int64_t OutCount(const PoolGeom& g) { return g.n * g.oh * g.ow * g.c; }
int64_t InCount(const PoolGeom& g) { return g.n * g.h * g.w * g.c; }
}  // namespace

absl::Status MaxPoolForward(const PoolGeom& g, const float* x, float* y, int32_t* argmax,
                            cudaStream_t stream) {
  return LaunchForEach("MaxPoolForward", OutCount(g), MaxPoolForwardFn{g, x, y, argmax}, stream);
}

absl::Status MaxPoolBackward(const PoolGeom& g, const int32_t* argmax, const float* dy, float* dx,
                             cudaStream_t stream) {
  return LaunchForEach("MaxPoolBackward", InCount(g), MaxPoolBackwardFn{g, argmax, dy, dx}, stream);
}

absl::Status AvgPoolForward(const PoolGeom& g, const float* x, float* y, cudaStream_t stream) {
  return LaunchForEach("AvgPoolForward", OutCount(g), AvgPoolForwardFn{g, x, y}, stream);
}

absl::Status AvgPoolBackward(const PoolGeom& g, const float* dy, float* dx, cudaStream_t stream) {
  return LaunchForEach("AvgPoolBackward", InCount(g), AvgPoolBackwardFn{g, dy, dx}, stream);
}

}  // namespace yoke::engine::cuda
