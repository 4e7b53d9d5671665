#include "engine/optim/adam.h"

#include <cmath>

#include "common/status.h"

namespace yoke {
namespace {
constexpr int64_t kParallelThreshold = 32768;  // elements
}  // namespace

Adam::Adam(ParamSet* params, const AdamOptions& options)
    : Optimizer(params), options_(options) {
  const Tensor& p = params->flat_values();
  m_ = Tensor::Zeros(p.shape(), DType::kF32, p.device());
  v_ = Tensor::Zeros(p.shape(), DType::kF32, p.device());
}

absl::Status Adam::Step(float lr) {
  RETURN_IF_ERROR(CheckStep(lr));
  const int64_t t = step_count_ + 1;
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.epsilon;
  // Bias corrections in double: 1 - b2^t is ~1e-3 at t = 1 and would lose
  // digits in float.
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(double{b1}, t)));
  const float inv_sqrt_bc2 =
      static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{b2}, t)));
  // Coupled L2 enters the gradient; decoupled decay shrinks p directly.
  const float l2 = options_.decoupled ? 0.0f : options_.weight_decay;
  const float shrink = options_.decoupled ? 1.0f - lr * options_.weight_decay : 1.0f;

  const int64_t n = params_->flat_values().numel();
  float* __restrict p = params_->flat_values().data<float>();
  const float* __restrict grad = params_->flat_grads().data<float>();
  float* __restrict m = m_.data<float>();
  float* __restrict v = v_.data<float>();
#pragma omp parallel for simd if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + l2 * p[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = shrink * p[i] - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
  step_count_ = t;
  return absl::OkStatus();
}

std::vector<std::pair<std::string, Tensor>> Adam::State() const {
  return {{"exp_avg", m_}, {"exp_avg_sq", v_}};
}

}  // namespace yoke
