#include "engine/layers/dense.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cpu/gemm.h"
#include "engine/registry.h"

namespace yoke::engine {

absl::StatusOr<Shape> DenseLayer::Build(const std::vector<Shape>& inputs,
                                        ParamSet* params) {
  if (inputs.size() != 1 || inputs[0].size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dense expects 1 input of rank 1 (features), got ",
        inputs.empty() ? std::string("none") : ShapeString(inputs[0]),
        "; add a flatten layer before it"));
  }
  params_ = params;
  in_dim_ = inputs[0][0];
  float bound = 1.0f / std::sqrt(static_cast<float>(in_dim_));
  w_ = params->Declare(name() + "/kernel", {in_dim_, units_}, Init::Uniform(bound));
  if (bias_) b_ = params->Declare(name() + "/bias", {units_}, Init::Uniform(bound));
  return Shape{units_};
}

absl::Status DenseLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                 const LayerContext& ctx) {
  const Tensor& x = *in[0];
  const int64_t n = x.dim(0);
  float* y = out->data<float>();
  // y (N, U) = x (N, D) . W (D, U) [+ b broadcast]
  if (bias_) {
    const float* b = params_->value(b_).data<float>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < units_; ++j) y[i * units_ + j] = b[j];
    }
  }
  return cpu::Sgemm(false, false, n, units_, in_dim_, 1.0f, x.data<float>(),
                    params_->value(w_).data<float>(), bias_ ? 1.0f : 0.0f, y);
}

absl::Status DenseLayer::Backward(const std::vector<const Tensor*>& in,
                                  const Tensor& out, const Tensor& dout,
                                  const std::vector<Tensor*>& din,
                                  const LayerContext& ctx) {
  const Tensor& x = *in[0];
  const int64_t n = x.dim(0);
  const float* dy = dout.data<float>();
  // dW (D, U) = x^T (D, N) . dy (N, U)
  RETURN_IF_ERROR(cpu::Sgemm(true, false, in_dim_, units_, n, 1.0f, x.data<float>(), dy,
                             0.0f, params_->grad(w_).data<float>()));
  if (bias_) {
    // db (U) = sum_n dy
    float* db = params_->grad(b_).data<float>();
    for (int64_t j = 0; j < units_; ++j) db[j] = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float* row = dy + i * units_;
      for (int64_t j = 0; j < units_; ++j) db[j] += row[j];
    }
  }
  if (din[0] != nullptr) {
    // dx (N, D) = dy (N, U) . W^T (U, D)
    RETURN_IF_ERROR(cpu::Sgemm(false, true, n, in_dim_, units_, 1.0f, dy,
                               params_->value(w_).data<float>(), 0.0f,
                               din[0]->data<float>()));
  }
  return absl::OkStatus();
}

namespace {
absl::StatusOr<std::unique_ptr<Layer>> MakeDense(const v1::LayerSpec& spec) {
  const auto& d = spec.dense();
  if (d.units() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense.units: must be > 0, got ", d.units()));
  }
  return std::unique_ptr<Layer>(new DenseLayer(d.units(), !d.no_bias()));
}
}  // namespace

YOKE_REGISTER_LAYER("dense", MakeDense);

}  // namespace yoke::engine
