// The CUDA global_avg_pool layer: x: (N, H, W, C) -> y: (N, C), the mean of
// each channel over all positions, and its backward (dy / HW everywhere),
// through engine/kernels/cuda/math/global_avg_pool.h (the CPU layer's
// summation order, so the results are equal bit for bit).
#include <memory>
#include <utility>

#include "common/status.h"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {
namespace {

class CudaGlobalAvgPoolLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override {
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(*out));
    const Tensor& x = *in[0];
    return GlobalAvgPoolForward(x.data<float>(), out->data<float>(), x.dim(0), x.dim(1) * x.dim(2),
                                x.dim(3), dc->stream());
  }

  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override {
    if (din[0] == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(dout));
    const Tensor& x = *in[0];
    return GlobalAvgPoolBackward(dout.data<float>(), din[0]->data<float>(), x.dim(0),
                                 x.dim(1) * x.dim(2), x.dim(3), dc->stream());
  }
};

}  // namespace

YOKE_REGISTER_DEVICE_LAYER("global_avg_pool", Device::Kind::kCUDA,
                           CudaFactory<CudaGlobalAvgPoolLayer>());

}  // namespace yoke::engine::cuda
