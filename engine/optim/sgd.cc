#include "engine/optim/sgd.h"

#include "common/status.h"
#include "engine/kernels/cpu/parallel.h"

namespace yoke::engine {
void SgdUpdate(const SgdOptions& o, float lr, float* __restrict p, const float* __restrict g,
               float* __restrict v, int64_t n, float grad_scale) {
  const float wd = o.weight_decay, mu = o.momentum, gs = grad_scale;
  if (mu == 0.0f) {
#pragma omp parallel for simd if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (gs * g[i] + wd * p[i]);
    return;
  }
  if (o.nesterov) {
#pragma omp parallel for simd if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      const float gi = gs * g[i] + wd * p[i];
      const float vi = mu * v[i] + gi;
      v[i] = vi;
      p[i] -= lr * (gi + mu * vi);
    }
    return;
  }
#pragma omp parallel for simd if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) {
    const float vi = mu * v[i] + gs * g[i] + wd * p[i];
    v[i] = vi;
    p[i] -= lr * vi;
  }
}

Sgd::Sgd(ParamSet* params, const SgdOptions& options) : Optimizer(params), options_(options) {}

absl::Status Sgd::AllocateState() {
  if (options_.momentum > 0.0f) {
    const Tensor& p = params_->flat_values();
    ASSIGN_OR_RETURN(velocity_, Tensor::AllocateZeros(p.shape(), DType::kF32, p.device(),
                                                      "optimizer momentum (sgd)"));
  }
  return absl::OkStatus();
}

absl::Status Sgd::Step(float lr, float grad_scale) {
  RETURN_IF_ERROR(CheckStep(lr, grad_scale));
  const Tensor& p = params_->flat_values();
  SgdUpdate(options_, lr, p.data<float>(), params_->flat_grads().data<float>(),
            velocity_.defined() ? velocity_.data<float>() : nullptr, p.numel(), grad_scale);
  ++step_count_;
  return absl::OkStatus();
}

std::vector<std::pair<std::string, Tensor>> Sgd::State() const {
  if (!velocity_.defined()) return {};
  return {{"momentum", velocity_}};
}

}  // namespace yoke::engine
