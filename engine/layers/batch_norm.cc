#include "engine/layers/batch_norm.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/registry.h"

namespace yoke {

absl::StatusOr<Shape> BatchNormLayer::Build(const std::vector<Shape>& inputs,
                                            ParamSet* params) {
  if (inputs.size() != 1 || inputs[0].empty() || NumElements(inputs[0]) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_norm expects 1 input with a channel (last) dimension, e.g. (H, W, C) "
        "or (C), got ",
        inputs.empty() ? std::string("none") : ShapeString(inputs[0])));
  }
  params_ = params;
  channels_ = inputs[0].back();
  per_example_ = NumElements(inputs[0]);
  gamma_ = params->Declare(name() + "/gamma", {channels_}, Init::Constant(1.0f));
  beta_ = params->Declare(name() + "/beta", {channels_}, Init::Constant(0.0f));
  mean_ = params->DeclareState(name() + "/running_mean", {channels_}, Init::Constant(0.0f));
  var_ = params->DeclareState(name() + "/running_var", {channels_}, Init::Constant(1.0f));
  return inputs[0];
}

absl::StatusOr<BatchNormLayer::Cached*> BatchNormLayer::PlanFor(int64_t n) {
  Cached& c = plans_[n];
  if (c.plan == nullptr) {
    ASSIGN_OR_RETURN(c.plan,
                     cpu::BatchNormPlan::Create(n * (per_example_ / channels_), channels_,
                                                epsilon_));
  }
  return &c;
}

absl::Status BatchNormLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                     const LayerContext& ctx) {
  const Tensor& x = *in[0];
  ASSIGN_OR_RETURN(Cached * c, PlanFor(x.dim(0)));
  const float* gamma = params_->value(gamma_).data<float>();
  const float* beta = params_->value(beta_).data<float>();
  float* running_mean = params_->state(mean_).data<float>();
  float* running_var = params_->state(var_).data<float>();
  if (!ctx.training) {
    return c->plan->ForwardInference(x.data<float>(), gamma, beta, running_mean,
                                     running_var, out->data<float>());
  }
  RETURN_IF_ERROR(c->plan->ForwardTraining(x.data<float>(), gamma, beta, out->data<float>()));
  // oneDNN reports the biased variance; the running estimate wants the
  // unbiased one. A single value per channel has no spread to estimate.
  const int64_t m = x.numel() / channels_;
  const float unbias = m > 1 ? static_cast<float>(m) / static_cast<float>(m - 1) : 1.0f;
  const float* bm = c->plan->batch_mean();
  const float* bv = c->plan->batch_var();
  for (int64_t j = 0; j < channels_; ++j) {
    running_mean[j] = (1.0f - momentum_) * running_mean[j] + momentum_ * bm[j];
    running_var[j] = (1.0f - momentum_) * running_var[j] + momentum_ * bv[j] * unbias;
  }
  return absl::OkStatus();
}

absl::Status BatchNormLayer::Backward(const std::vector<const Tensor*>& in,
                                      const Tensor& out, const Tensor& dout,
                                      const std::vector<Tensor*>& din,
                                      const LayerContext& ctx) {
  const Tensor& x = *in[0];
  ASSIGN_OR_RETURN(Cached * c, PlanFor(x.dim(0)));
  Tensor* dx = din[0];
  if (dx == nullptr) {
    if (!c->scratch_dx.defined()) c->scratch_dx = Tensor::Empty(x.shape());
    dx = &c->scratch_dx;
  }
  return c->plan->Backward(x.data<float>(), dout.data<float>(),
                           params_->value(gamma_).data<float>(),
                           params_->value(beta_).data<float>(), !ctx.training,
                           params_->state(mean_).data<float>(),
                           params_->state(var_).data<float>(), dx->data<float>(),
                           params_->grad(gamma_).data<float>(),
                           params_->grad(beta_).data<float>());
}

namespace {

absl::StatusOr<std::unique_ptr<Layer>> MakeBatchNorm(const v1::LayerSpec& spec) {
  const v1::BatchNormSpec& b = spec.batch_norm();
  if (b.momentum() < 0 || b.momentum() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_norm.momentum: must be in (0, 1] (or unset for 0.1), got ", b.momentum()));
  }
  if (b.epsilon() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch_norm.epsilon: must be > 0 (or unset for 1e-5), got ", b.epsilon()));
  }
  const float momentum = b.momentum() == 0 ? 0.1f : b.momentum();
  const float epsilon = b.epsilon() == 0 ? 1e-5f : b.epsilon();
  return std::unique_ptr<Layer>(new BatchNormLayer(momentum, epsilon));
}

}  // namespace

YOKE_REGISTER_LAYER("batch_norm", MakeBatchNorm);

}  // namespace yoke
