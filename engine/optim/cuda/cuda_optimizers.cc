#include "engine/optim/cuda/cuda_optimizers.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/device_context.h"
#include "engine/kernels/cuda/math/optim.h"
#include "engine/kernels/cuda/optim_kernels.h"

namespace yoke::engine::cuda {
namespace {

absl::Status Field(const std::string& field, const std::string& what, float got) {
  return absl::InvalidArgumentError(
      absl::StrCat("training.optimizer.", field, ": ", what, ", got ", got));
}

// As engine/optim/optimizer.cc: an unset (0) float means the documented default.
float OrDefault(float v, float d) { return v == 0.0f ? d : v; }

// Optimizer::CheckStep, for parameters on a CUDA device.
absl::Status CheckCudaStep(const ParamSet& params, float lr, float grad_scale) {
  if (!params.finalized()) {
    return absl::FailedPreconditionError("optimizer step: the ParamSet is not finalized");
  }
  if (!params.flat_values().device().is_cuda()) {
    return absl::FailedPreconditionError(
        "optimizer step: parameters are not on a CUDA device; this optimizer runs on CUDA");
  }
  if (!(lr >= 0.0f) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer step: learning rate must be finite and >= 0, got ", lr));
  }
  if (!(grad_scale > 0.0f) || !std::isfinite(grad_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer step: gradient scale must be finite and > 0, got ", grad_scale));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ZerosLike(const Tensor& p, const char* what) {
  return Tensor::AllocateZeros(p.shape(), DType::kF32, p.device(), what);
}

// SGD on CUDA: engine/optim/sgd.h's semantics, SgdStepFn's arithmetic.
class CudaSgd final : public Optimizer {
 public:
  CudaSgd(ParamSet* params, float momentum, bool nesterov, float weight_decay)
      : Optimizer(params), momentum_(momentum), nesterov_(nesterov), weight_decay_(weight_decay) {}
  const char* type() const override { return "sgd"; }
  absl::Status AllocateState() override {
    if (momentum_ > 0.0f) {
      ASSIGN_OR_RETURN(velocity_, ZerosLike(params_->flat_values(), "optimizer momentum (sgd)"));
    }
    return absl::OkStatus();
  }
  using Optimizer::Step;
  absl::Status Step(float lr, float grad_scale) override {
    RETURN_IF_ERROR(CheckCudaStep(*params_, lr, grad_scale));
    const Tensor& p = params_->flat_values();
    ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(p.device().index));
    SgdStepFn f;
    f.p = p.data<float>();
    f.g = params_->flat_grads().data<float>();
    f.v = velocity_.defined() ? velocity_.data<float>() : nullptr;
    f.lr = lr;
    f.grad_scale = grad_scale;
    f.momentum = momentum_;
    f.weight_decay = weight_decay_;
    // As SgdUpdate: momentum 0 is plain SGD whatever nesterov says.
    f.mode = momentum_ == 0.0f ? SgdStepFn::kPlain
                               : (nesterov_ ? SgdStepFn::kNesterov : SgdStepFn::kMomentum);
    RETURN_IF_ERROR(LaunchSgdStep(f, p.numel(), ctx->stream()));
    ++step_count_;
    return absl::OkStatus();
  }
  std::vector<std::pair<std::string, Tensor>> State() const override {
    if (!velocity_.defined()) return {};
    return {{"momentum", velocity_}};
  }

 private:
  float momentum_;
  bool nesterov_;
  float weight_decay_;
  Tensor velocity_;
};

// Adam / AdamW on CUDA: engine/optim/adam.h's semantics, AdamStepFn's arithmetic.
class CudaAdam final : public Optimizer {
 public:
  CudaAdam(ParamSet* params, float beta1, float beta2, float epsilon, float weight_decay,
           bool decoupled)
      : Optimizer(params),
        beta1_(beta1),
        beta2_(beta2),
        epsilon_(epsilon),
        weight_decay_(weight_decay),
        decoupled_(decoupled) {}
  const char* type() const override { return decoupled_ ? "adamw" : "adam"; }
  absl::Status AllocateState() override {
    ASSIGN_OR_RETURN(m_, ZerosLike(params_->flat_values(), "optimizer first moment (adam)"));
    ASSIGN_OR_RETURN(v_, ZerosLike(params_->flat_values(), "optimizer second moment (adam)"));
    return absl::OkStatus();
  }
  using Optimizer::Step;
  absl::Status Step(float lr, float grad_scale) override {
    RETURN_IF_ERROR(CheckCudaStep(*params_, lr, grad_scale));
    const Tensor& p = params_->flat_values();
    ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(p.device().index));
    const int64_t t = step_count_ + 1;
    AdamStepFn f;
    f.p = p.data<float>();
    f.g = params_->flat_grads().data<float>();
    f.m = m_.data<float>();
    f.v = v_.data<float>();
    f.grad_scale = grad_scale;
    f.beta1 = beta1_;
    f.beta2 = beta2_;
    f.epsilon = epsilon_;
    f.s = AdamScalarsFor(lr, beta1_, beta2_, weight_decay_, decoupled_, t);
    RETURN_IF_ERROR(LaunchAdamStep(f, p.numel(), ctx->stream()));
    step_count_ = t;
    return absl::OkStatus();
  }
  std::vector<std::pair<std::string, Tensor>> State() const override {
    return {{"exp_avg", m_}, {"exp_avg_sq", v_}};
  }

 private:
  float beta1_, beta2_, epsilon_, weight_decay_;
  bool decoupled_;
  Tensor m_, v_;
};

// The hyper-parameter checks of engine/optim/optimizer.cc's makers (type, lr
// and weight_decay were checked by CreateOptimizer before it came here).
absl::StatusOr<std::unique_ptr<Optimizer>> MakeSgd(const v1::OptimizerSpec& spec,
                                                   ParamSet* params) {
  if (!(spec.momentum() >= 0.0f && spec.momentum() < 1.0f)) {
    return Field("momentum", "must be in [0, 1)", spec.momentum());
  }
  return std::unique_ptr<Optimizer>(
      new CudaSgd(params, spec.momentum(), spec.nesterov(), spec.weight_decay()));
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdam(const v1::OptimizerSpec& spec, ParamSet* params,
                                                    bool decoupled) {
  const float b1 = OrDefault(spec.beta1(), 0.9f), b2 = OrDefault(spec.beta2(), 0.999f);
  const float eps = OrDefault(spec.epsilon(), 1e-8f);
  if (!(b1 > 0.0f && b1 < 1.0f)) return Field("beta1", "must be in (0, 1)", b1);
  if (!(b2 > 0.0f && b2 < 1.0f)) return Field("beta2", "must be in (0, 1)", b2);
  if (!(eps > 0.0f) || !std::isfinite(eps)) return Field("epsilon", "must be finite and > 0", eps);
  return std::unique_ptr<Optimizer>(
      new CudaAdam(params, b1, b2, eps, spec.weight_decay(), decoupled));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> CreateCudaOptimizer(const v1::OptimizerSpec& spec,
                                                               ParamSet* params) {
  if (params == nullptr || !params->finalized()) {
    return absl::FailedPreconditionError("CreateOptimizer: the ParamSet is not finalized");
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> opt;
  if (spec.type() == "sgd") {
    opt = MakeSgd(spec, params);
  } else if (spec.type() == "adam" || spec.type() == "adamw") {
    opt = MakeAdam(spec, params, spec.type() == "adamw");
  } else {
    return absl::UnimplementedError("optimizer '" + spec.type() +
                                    "' has no CUDA implementation yet");
  }
  if (!opt.ok()) return opt.status();
  RETURN_IF_ERROR((*opt)->AllocateState());
  return opt;
}

absl::StatusOr<double> CudaGradNorm(const ParamSet& params, float grad_scale) {
  if (!params.finalized() || !params.flat_grads().device().is_cuda()) {
    return absl::FailedPreconditionError(
        "GradNorm on CUDA: the ParamSet is not finalized on a CUDA device");
  }
  const Tensor& g = params.flat_grads();
  const int64_t n = g.numel();
  if (n == 0) return 0.0;
  ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(g.device().index));
  const size_t chunks = static_cast<size_t>(NormPartials(n));
  ASSIGN_OR_RETURN(void* scratch, ctx->Workspace((chunks + 1) * sizeof(double), "GradNorm"));
  double* partial = static_cast<double*>(scratch);
  double* total = partial + chunks;
  RETURN_IF_ERROR(LaunchSumSquares(g.data<float>(), n, partial, total, ctx->stream()));
  ASSIGN_OR_RETURN(void* pinned, ctx->PinnedScratch(sizeof(double)));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(pinned, total, sizeof(double), cudaMemcpyDeviceToHost, ctx->stream()));
  RETURN_IF_ERROR(ctx->Synchronize());
  return static_cast<double>(grad_scale) * std::sqrt(*static_cast<double*>(pinned));
}

}  // namespace yoke::engine::cuda
