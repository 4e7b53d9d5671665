#include "engine/layers/cuda/batch_norm.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cuda/batch_norm_kernels.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine::cuda {
namespace {

absl::Status RefuseSync(const LayerContext& ctx) {
  if (ctx.training && ctx.sync_stats != nullptr) {
    return absl::FailedPreconditionError(
        "synchronized batch norm on CUDA needs the GPU reducer; not yet");
  }
  return absl::OkStatus();
}

}  // namespace

CudaBatchNormLayer::CudaBatchNormLayer(std::unique_ptr<Layer> twin, const v1::LayerSpec& spec)
    : CudaLayer(std::move(twin), spec),
      momentum_(shapes::BatchNormMomentum(spec.batch_norm())),
      epsilon_(shapes::BatchNormEpsilon(spec.batch_norm())) {}

absl::StatusOr<BnBuffers> CudaBatchNormLayer::Buffers(const Tensor& x, DeviceContext** ctx) {
  const int64_t c = input_shapes()[0].back();
  const int64_t rows = x.numel() / c;
  ASSIGN_OR_RETURN(*ctx, Context(x));
  if (!channel_values_.defined()) {
    ASSIGN_OR_RETURN(channel_values_,
                     Tensor::Allocate({kBnChannelFloats * c}, DType::kF32, x.device(),
                                      absl::StrCat("the batch statistics of layer ", name())));
  }
  const size_t bytes = static_cast<size_t>(BnScratchDoubles(rows, c)) * sizeof(double);
  ASSIGN_OR_RETURN(void* scratch, (*ctx)->Workspace(bytes, "batch_norm partial sums"));
  return BnLayout(rows, c, channel_values_.data<float>(), static_cast<double*>(scratch));
}

BnParams CudaBatchNormLayer::Params() const {
  return BnParams{param(0).data<float>(),
                  param(1).data<float>(),
                  state(0).data<float>(),
                  state(1).data<float>(),
                  momentum_,
                  epsilon_};
}

absl::Status CudaBatchNormLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                         const LayerContext& ctx) {
  RETURN_IF_ERROR(RefuseSync(ctx));
  const Tensor& x = *in[0];
  if (x.numel() == 0) return absl::OkStatus();
  DeviceContext* dc = nullptr;
  ASSIGN_OR_RETURN(BnBuffers b, Buffers(x, &dc));
  if (!ctx.training) {
    return LaunchBnForwardInference(b, Params(), x.data<float>(), out->data<float>(), dc->stream());
  }
  RETURN_IF_ERROR(
      LaunchBnForwardTraining(b, Params(), x.data<float>(), out->data<float>(), dc->stream()));
  trained_rows_ = b.rows;
  return absl::OkStatus();
}

absl::Status CudaBatchNormLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                          const Tensor& dout, const std::vector<Tensor*>& din,
                                          const LayerContext& ctx) {
  RETURN_IF_ERROR(RefuseSync(ctx));
  const Tensor& x = *in[0];
  if (x.numel() == 0) {
    // No samples: the gradients are zero, overwritten as Backward must.
    param_grad(0).SetZero();
    param_grad(1).SetZero();
    return absl::OkStatus();
  }
  DeviceContext* dc = nullptr;
  ASSIGN_OR_RETURN(BnBuffers b, Buffers(x, &dc));
  if (ctx.training && trained_rows_ != b.rows) {
    return absl::FailedPreconditionError(absl::StrCat(
        name(), ": training Backward needs the training Forward of the same batch first"));
  }
  float* dx = din[0] != nullptr ? din[0]->data<float>() : nullptr;
  return LaunchBnBackward(b, Params(), ctx.training, x.data<float>(), dout.data<float>(), dx,
                          param_grad(0).data<float>(), param_grad(1).data<float>(), dc->stream());
}

YOKE_REGISTER_DEVICE_LAYER("batch_norm", Device::Kind::kCUDA, CudaFactory<CudaBatchNormLayer>());

}  // namespace yoke::engine::cuda
