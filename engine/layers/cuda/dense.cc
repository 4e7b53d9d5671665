#include "engine/layers/cuda/dense.h"

#include "common/status.h"
#include "engine/kernels/cuda/bias.h"

namespace yoke::engine::cuda {

absl::StatusOr<LtGemm*> CudaDenseLayer::Gemm(DenseProduct p, int64_t n, bool tf32) {
  const std::tuple<int, int64_t, bool> key{static_cast<int>(p), n, tf32};
  auto it = gemms_.find(key);
  if (it != gemms_.end()) return it->second.get();
  // Three products per batch size; forget everything past four sizes.
  if (gemms_.size() >= 12) gemms_.clear();
  const int64_t d = input_shapes()[0][0], u = output_shape()[0];
  GemmShape shape = DenseGemm(p, n, d, u);
  shape.tf32 = tf32;
  ASSIGN_OR_RETURN(std::unique_ptr<LtGemm> made, LtGemm::Create(shape));
  LtGemm* g = made.get();
  gemms_[key] = std::move(made);
  return g;
}

absl::Status CudaDenseLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                     const LayerContext& ctx) {
  const Tensor& x = *in[0];
  const int64_t n = x.dim(0), u = output_shape()[0];
  ASSIGN_OR_RETURN(DeviceContext * dc, Context(x));
  ASSIGN_OR_RETURN(LtGemm * g, Gemm(DenseProduct::kForward, n, dc->tf32()));
  // y^T = W^T x^T (matmul.h)
  RETURN_IF_ERROR(g->Run(dc, param(0).data<float>(), x.data<float>(), out->data<float>()));
  if (has_bias()) RETURN_IF_ERROR(BiasAdd(dc, out->data<float>(), param(1).data<float>(), n, u));
  return absl::OkStatus();
}

absl::Status CudaDenseLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                      const Tensor& dout, const std::vector<Tensor*>& din,
                                      const LayerContext& ctx) {
  const Tensor& x = *in[0];
  const int64_t n = x.dim(0), u = output_shape()[0];
  ASSIGN_OR_RETURN(DeviceContext * dc, Context(x));
  const float* dy = dout.data<float>();
  // dW^T = dy^T x
  ASSIGN_OR_RETURN(LtGemm * gw, Gemm(DenseProduct::kBackwardWeights, n, dc->tf32()));
  RETURN_IF_ERROR(gw->Run(dc, dy, x.data<float>(), param_grad(0).data<float>()));
  if (has_bias()) RETURN_IF_ERROR(BiasGradient(dc, dy, param_grad(1).data<float>(), n, u));
  if (din[0] != nullptr) {
    // dx^T = W dy^T
    ASSIGN_OR_RETURN(LtGemm * gd, Gemm(DenseProduct::kBackwardData, n, dc->tf32()));
    RETURN_IF_ERROR(gd->Run(dc, param(0).data<float>(), dy, din[0]->data<float>()));
  }
  return absl::OkStatus();
}

YOKE_REGISTER_DEVICE_LAYER("dense", Device::Kind::kCUDA, CudaFactory<CudaDenseLayer>());

}  // namespace yoke::engine::cuda
