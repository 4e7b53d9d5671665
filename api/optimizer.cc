// yoke::Optimizer (include/yoke/optimizer.h): the engine's fused SGD and
// Adam(W) passes, with the model's gradient count as the gradient scale.
#include "yoke/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "api/internal.h"
#include "common/status.h"
#include "engine/optim/adam.h"
#include "engine/optim/sgd.h"

namespace yoke {

struct Optimizer::Impl {
  std::shared_ptr<Model::Impl> model;  // keeps the ParamSet alive
  std::unique_ptr<engine::Optimizer> opt;
  float lr = 0;
};

namespace {

absl::Status Check(bool ok, const char* type, const char* field, const char* what, float got) {
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(type, ": ", field, " ", what, ", got ", got));
}

absl::Status CheckCommon(const char* type, float lr, float weight_decay) {
  RETURN_IF_ERROR(Check(lr > 0 && std::isfinite(lr), type, "lr", "must be finite and > 0", lr));
  return Check(weight_decay >= 0 && std::isfinite(weight_decay), type, "weight_decay",
               "must be finite and >= 0", weight_decay);
}

absl::Status CheckAdam(const char* type, const AdamOptions& o) {
  RETURN_IF_ERROR(CheckCommon(type, o.lr, o.weight_decay));
  RETURN_IF_ERROR(Check(o.beta1 >= 0 && o.beta1 < 1, type, "beta1", "must be in [0, 1)", o.beta1));
  RETURN_IF_ERROR(Check(o.beta2 >= 0 && o.beta2 < 1, type, "beta2", "must be in [0, 1)", o.beta2));
  return Check(o.epsilon > 0 && std::isfinite(o.epsilon), type, "epsilon", "must be finite and > 0",
               o.epsilon);
}

}  // namespace

Optimizer::Optimizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;
Optimizer::~Optimizer() = default;

absl::StatusOr<Optimizer> Optimizer::Sgd(Model& model, const SgdOptions& o) {
  RETURN_IF_ERROR(CheckCommon("sgd", o.lr, o.weight_decay));
  RETURN_IF_ERROR(
      Check(o.momentum >= 0 && o.momentum < 1, "sgd", "momentum", "must be in [0, 1)", o.momentum));
  RETURN_IF_ERROR(Check(!o.nesterov || o.momentum > 0, "sgd", "momentum",
                        "must be > 0 with nesterov", o.momentum));
  auto impl = std::make_unique<Impl>();
  impl->model = model.impl();
  engine::SgdOptions e;
  e.momentum = o.momentum;
  e.nesterov = o.nesterov;
  e.weight_decay = o.weight_decay;
  impl->opt = std::make_unique<engine::Sgd>(&impl->model->model->params(), e);
  RETURN_IF_ERROR(impl->opt->AllocateState());
  impl->lr = o.lr;
  return Optimizer(std::move(impl));
}

namespace {

absl::StatusOr<std::unique_ptr<engine::Optimizer>> MakeAdam(Model::Impl& m, const AdamOptions& o,
                                                            bool decoupled) {
  engine::AdamOptions e;
  e.beta1 = o.beta1;
  e.beta2 = o.beta2;
  e.epsilon = o.epsilon;
  e.weight_decay = o.weight_decay;
  e.decoupled = decoupled;
  auto opt = std::make_unique<engine::Adam>(&m.model->params(), e);
  RETURN_IF_ERROR(opt->AllocateState());
  return std::unique_ptr<engine::Optimizer>(std::move(opt));
}

}  // namespace

absl::StatusOr<Optimizer> Optimizer::Adam(Model& model, const AdamOptions& o) {
  RETURN_IF_ERROR(CheckAdam("adam", o));
  auto impl = std::make_unique<Impl>();
  impl->model = model.impl();
  ASSIGN_OR_RETURN(impl->opt, MakeAdam(*impl->model, o, /*decoupled=*/false));
  impl->lr = o.lr;
  return Optimizer(std::move(impl));
}

absl::StatusOr<Optimizer> Optimizer::AdamW(Model& model, const AdamOptions& o) {
  RETURN_IF_ERROR(CheckAdam("adamw", o));
  auto impl = std::make_unique<Impl>();
  impl->model = model.impl();
  ASSIGN_OR_RETURN(impl->opt, MakeAdam(*impl->model, o, /*decoupled=*/true));
  impl->lr = o.lr;
  return Optimizer(std::move(impl));
}

absl::Status Optimizer::Step() {
  Model::Impl& m = *impl_->model;
  if (m.step_prepared) {
    return absl::FailedPreconditionError(
        "Optimizer::Step: this step's gradients are still being allreduced; call "
        "DistributedContext::AllreduceGradients(model) before Step");
  }
  // The buffer holds a sum over grad_count samples: step on their mean.
  const float scale = 1.0f / static_cast<float>(std::max<int64_t>(m.grad_count, 1));
  return impl_->opt->Step(impl_->lr, scale);
}

void Optimizer::ZeroGrad() {
  impl_->model->model->params().flat_grads().SetZero();
  impl_->model->grad_count = 0;
}

float Optimizer::lr() const { return impl_->lr; }

absl::Status Optimizer::set_lr(float lr) {
  if (!(lr >= 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Optimizer::set_lr: must be finite and >= 0, got ", lr));
  }
  impl_->lr = lr;
  return absl::OkStatus();
}

int64_t Optimizer::step_count() const { return impl_->opt->step_count(); }

}  // namespace yoke
