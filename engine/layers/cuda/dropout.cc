// The CUDA dropout layer: the CPU DropoutLayer's masks bit for bit (the
// same Philox draws per element, engine/kernels/cuda/math/dropout.h), kept
// on the device (u8 per element) for Backward. Eval, and rate 0, copy.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {
namespace {

class CudaDropoutLayer final : public CudaLayer {
 public:
  CudaDropoutLayer(std::unique_ptr<Layer> twin, v1::LayerSpec spec)
      : CudaLayer(std::move(twin), std::move(spec)), rate_(this->spec().dropout().rate()) {}

  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override {
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(*out));
    const int64_t n = in[0]->numel();
    masked_ = ctx.training && rate_ > 0.0f;
    if (!masked_) return CopyOnStream(out->raw(), in[0]->raw(), in[0]->bytes(), dc->stream());
    // The CPU layer's counter layout and its limits: [replica:16][index:16][block:32].
    if (ctx.replica < 0 || ctx.replica >= (1 << 16) || index() < 0 || index() >= (1 << 16) ||
        n >= (int64_t{1} << 34)) {
      return absl::OutOfRangeError(absl::StrCat(
          "dropout: replica ", ctx.replica, ", layer index ", index(), " or tensor size ", n,
          " exceeds the mask counter space (replica, index < 65536; size < 2^34)"));
    }
    if (!mask_.defined() || mask_.numel() < n) {
      ASSIGN_OR_RETURN(mask_, Tensor::Allocate({n}, DType::kU8, out->device(),
                                               absl::StrCat("the mask of layer ", name())));
    }
    draw_ = DropoutParams(rate_, ctx.seed, ctx.step, ctx.replica, index());
    return DropoutForward(draw_, in[0]->data<float>(), out->data<float>(), mask_.data<uint8_t>(), n,
                          dc->stream());
  }

  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override {
    if (din[0] == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(dout));
    if (!masked_) return CopyOnStream(din[0]->raw(), dout.raw(), dout.bytes(), dc->stream());
    return DropoutBackward(mask_.data<uint8_t>(), draw_.scale, dout.data<float>(),
                           din[0]->data<float>(), dout.numel(), dc->stream());
  }

 private:
  float rate_;
  Tensor mask_;          // (capacity,) u8 on the device, 1 = kept; grows
  bool masked_ = false;  // whether the last Forward applied mask_
  DropoutDraw draw_;     // that Forward's draw (its scale)
};

}  // namespace

YOKE_REGISTER_DEVICE_LAYER("dropout", Device::Kind::kCUDA, CudaFactory<CudaDropoutLayer>());

}  // namespace yoke::engine::cuda
