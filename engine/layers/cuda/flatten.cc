// The CUDA flatten layer: as the CPU FlattenLayer, a copy of the input into
// the model's separate output buffer (same bytes, another shape), and of dy
// into dx; both on the device's compute stream.
#include <memory>
#include <utility>

#include "common/status.h"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {
namespace {

class CudaFlattenLayer final : public CudaLayer {
 public:
  using CudaLayer::CudaLayer;

  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override {
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(*out));
    return CopyOnStream(out->raw(), in[0]->raw(), in[0]->bytes(), dc->stream());
  }

  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override {
    if (din[0] == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(dout));
    return CopyOnStream(din[0]->raw(), dout.raw(), dout.bytes(), dc->stream());
  }
};

}  // namespace

YOKE_REGISTER_DEVICE_LAYER("flatten", Device::Kind::kCUDA, CudaFactory<CudaFlattenLayer>());

}  // namespace yoke::engine::cuda
