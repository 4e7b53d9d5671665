#include "engine/layers/dense.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cpu/gemm.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {

namespace {

// Whether dx = dy W^T is computed as (W dy^T)^T. oneDNN 2.6's sgemm is slow
// on the direct product when the batch is small and the contraction (U)
// long: for the zoo CNN's 3136 -> 1024 layer at batch 64 it takes 6.1-6.7 ms,
// against 2.0 ms for the transposed product as a oneDNN matmul primitive
// (2.6-2.8 ms through sgemm) and its transposition (0.05 ms).
// Measured on AVX-512 with 2 threads (bench/README.md, "CNN step"): the
// transposed form wins from U = 256 while the batch is at most U / 4 and
// loses on short contractions (up to 10x at U = 10). The rule depends on the
// shapes alone, so a run's bits do not depend on timing.
bool TransposedBackwardData(int64_t n, int64_t units) { return units >= 256 && 4 * n <= units; }

}  // namespace

absl::StatusOr<Shape> DenseLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  // The shape rules are shared with job validation (engine/shapes/).
  RETURN_IF_ERROR(shapes::DenseOutput(inputs, units_).status());
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

absl::Status DenseLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                  const Tensor& dout, const std::vector<Tensor*>& din,
                                  const LayerContext& ctx) {
  const Tensor& x = *in[0];
  const int64_t n = x.dim(0);
  const float* dy = dout.data<float>();
  // dW (D, U) = x^T (D, N) . dy (N, U)
  RETURN_IF_ERROR(cpu::Sgemm(true, false, in_dim_, units_, n, 1.0f, x.data<float>(), dy, 0.0f,
                             params_->grad(w_).data<float>()));
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
    const float* w = params_->value(w_).data<float>();
    float* dx = din[0]->data<float>();
    if (TransposedBackwardData(n, units_)) {
      // dx^T (D, N) = W (D, U) . dy^T (U, N), then transposed into dx.
      dx_t_.resize(static_cast<size_t>(in_dim_ * n));
      cpu::MatmulPlan* plan = nullptr;
      for (auto& p : dx_t_plans_) {
        if (p->Matches(false, true, in_dim_, n, units_)) plan = p.get();
      }
      if (plan == nullptr) {
        if (dx_t_plans_.size() >= 4) dx_t_plans_.erase(dx_t_plans_.begin());
        ASSIGN_OR_RETURN(std::unique_ptr<cpu::MatmulPlan> made,
                         cpu::MatmulPlan::Create(false, true, in_dim_, n, units_));
        plan = made.get();
        dx_t_plans_.push_back(std::move(made));
      }
      RETURN_IF_ERROR(plan->Run(w, dy, dx_t_.data()));
      const float* t = dx_t_.data();
      const int64_t d = in_dim_;
#pragma omp parallel for if (n * d > 32768)
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < d; ++j) dx[i * d + j] = t[j * n + i];
      }
    } else {
      // dx (N, D) = dy (N, U) . W^T (U, D)
      RETURN_IF_ERROR(cpu::Sgemm(false, true, n, in_dim_, units_, 1.0f, dy, w, 0.0f, dx));
    }
  }
  return absl::OkStatus();
}

namespace {
absl::StatusOr<std::unique_ptr<Layer>> MakeDense(const v1::LayerSpec& spec) {
  const auto& d = spec.dense();
  RETURN_IF_ERROR(CheckArguments(spec));
  return std::unique_ptr<Layer>(new DenseLayer(d.units(), !d.no_bias()));
}
}  // namespace

YOKE_REGISTER_LAYER("dense", MakeDense);

}  // namespace yoke::engine
