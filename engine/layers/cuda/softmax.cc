// The CUDA softmax layer over the last dimension: the CPU SoftmaxLayer's
// forward (max-subtracted, same order) and backward, one row per thread
// (engine/kernels/cuda/math/softmax.h).
#include <memory>
#include <utility>

#include "common/status.h"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {
namespace {

class CudaSoftmaxLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override {
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(*out));
    const int64_t k = in[0]->dim(-1);
    return SoftmaxForward(in[0]->data<float>(), out->data<float>(), in[0]->numel() / k, k,
                          dc->stream());
  }

  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override {
    if (din[0] == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(dout));
    const int64_t k = out.dim(-1);
    return SoftmaxBackward(out.data<float>(), dout.data<float>(), din[0]->data<float>(),
                           out.numel() / k, k, dc->stream());
  }
};

}  // namespace

YOKE_REGISTER_DEVICE_LAYER("softmax", Device::Kind::kCUDA, CudaFactory<CudaSoftmaxLayer>());

}  // namespace yoke::engine::cuda
