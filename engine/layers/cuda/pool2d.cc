// The CUDA max_pool2d and avg_pool2d layers: the CPU Pool2dLayer's windows,
// padding (incl. asymmetric "same"), tie rule and rounding, through
// engine/kernels/cuda/math/pool.h. Max pooling keeps each output's winner
// (an int32 per output, on the device) from Forward for Backward, which
// gathers dy per input element (no atomics). The model fuses nothing on
// CUDA, so FuseReluBackward keeps its default (false).
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cuda/layer_kernels.h"
#include "engine/kernels/cuda/math/pool_geom.h"
#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {
namespace {

class CudaPool2dLayer final : public CudaLayer {
 public:
  CudaPool2dLayer(std::unique_ptr<Layer> twin, v1::LayerSpec spec)
      : CudaLayer(std::move(twin), std::move(spec)),
        max_(std::strcmp(type(), "max_pool2d") == 0),
        window_(
            shapes::Pool2dWindow(max_ ? this->spec().max_pool2d() : this->spec().avg_pool2d())) {}

  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override {
    ASSIGN_OR_RETURN(PoolGeom g, Geometry(*in[0]));
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(*out));
    if (!max_) return AvgPoolForward(g, in[0]->data<float>(), out->data<float>(), dc->stream());
    const int64_t count = out->numel();
    if (!argmax_.defined() || argmax_.numel() < count) {
      ASSIGN_OR_RETURN(argmax_, Tensor::Allocate({count}, DType::kI32, out->device(),
                                                 absl::StrCat("the argmax of layer ", name())));
    }
    forward_batch_ = g.n;
    return MaxPoolForward(g, in[0]->data<float>(), out->data<float>(), argmax_.data<int32_t>(),
                          dc->stream());
  }

  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override {
    if (din[0] == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(PoolGeom g, Geometry(*in[0]));
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(dout));
    if (!max_) return AvgPoolBackward(g, dout.data<float>(), din[0]->data<float>(), dc->stream());
    if (forward_batch_ != g.n) {
      return absl::FailedPreconditionError(
          absl::StrCat(type(), ": Backward without a Forward of batch ", g.n));
    }
    return MaxPoolBackward(g, argmax_.data<int32_t>(), dout.data<float>(), din[0]->data<float>(),
                           dc->stream());
  }

 private:
  // The geometry for x, or the CPU plan's error for windows of padding only.
  absl::StatusOr<PoolGeom> Geometry(const Tensor& x) const {
    const Shape& s = input_shapes()[0];
    if (PoolHasEmptyWindow(s, window_.size, window_.stride, window_.same)) {
      return absl::InvalidArgumentError(
          absl::StrCat(type(), ": some window covers only padding for input (", s[0], ",", s[1],
                       ",", s[2], ")"));
    }
    return MakePoolGeom(s, x.dim(0), window_.size, window_.stride, window_.same);
  }

  bool max_;
  shapes::Window window_;
  Tensor argmax_;               // (capacity,) int32 on the device; grows
  int64_t forward_batch_ = -1;  // the batch of the last max-pool Forward
};

}  // namespace

YOKE_REGISTER_DEVICE_LAYER("max_pool2d", Device::Kind::kCUDA, CudaFactory<CudaPool2dLayer>());
YOKE_REGISTER_DEVICE_LAYER("avg_pool2d", Device::Kind::kCUDA, CudaFactory<CudaPool2dLayer>());

}  // namespace yoke::engine::cuda
