// The CUDA add layer (residual joins): y = x_0 + x_1 + ..., summed in the
// CPU AddLayer's order (the first two, then each further input), so the
// result rounds alike; Backward copies dy to every input that needs it.
#include <memory>
#include <utility>

#include "common/status.h"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {
namespace {

class CudaAddLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override {
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(*out));
    const int64_t n = out->numel();
    float* y = out->data<float>();
    RETURN_IF_ERROR(AddForward(in[0]->data<float>(), in[1]->data<float>(), y, n, dc->stream()));
    for (size_t k = 2; k < in.size(); ++k) {
      RETURN_IF_ERROR(AddInPlace(y, in[k]->data<float>(), n, dc->stream()));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override {
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(dout));
    for (Tensor* d : din) {
      if (d != nullptr)
        RETURN_IF_ERROR(CopyOnStream(d->raw(), dout.raw(), dout.bytes(), dc->stream()));
    }
    return absl::OkStatus();
  }
};

}  // namespace

YOKE_REGISTER_DEVICE_LAYER("add", Device::Kind::kCUDA, CudaFactory<CudaAddLayer>());

}  // namespace yoke::engine::cuda
