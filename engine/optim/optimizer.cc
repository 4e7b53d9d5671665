#include "engine/optim/optimizer.h"

#include <cmath>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/name_list.h"
#include "common/status.h"
#include "engine/device_backend.h"
#include "engine/optim/adam.h"
#include "engine/optim/sgd.h"

namespace yoke::engine {
namespace {

absl::Status Field(const std::string& field, const std::string& what, float got) {
  return absl::InvalidArgumentError(
      absl::StrCat("training.optimizer.", field, ": ", what, ", got ", got));
}

// proto3 reports an unset float as 0; these fields document a non-zero
// default, so 0 means "use it".
float OrDefault(float v, float d) { return v == 0.0f ? d : v; }

}  // namespace

absl::Status Optimizer::CheckStep(float lr, float grad_scale) const {
  if (!params_->finalized()) {
    return absl::FailedPreconditionError("optimizer step: the ParamSet is not finalized");
  }
  if (params_->flat_values().device().is_cuda()) {
    return absl::FailedPreconditionError(
        "optimizer step: parameters live on a CUDA device; this optimizer runs on the CPU");
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

double GradNorm(const ParamSet& params, float grad_scale) {
  const Tensor& g = params.flat_grads();
  const float* p = g.data<float>();
  const int64_t n = g.numel();
  double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]) * p[i];
  return static_cast<double>(grad_scale) * std::sqrt(sum);
}

float ClipFactor(double norm, float max_norm) {
  if (!(max_norm > 0.0f) || !(norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / (norm + 1e-6));
}

namespace {

absl::StatusOr<std::unique_ptr<Optimizer>> MakeSgd(const v1::OptimizerSpec& spec,
                                                   ParamSet* params) {
  if (!(spec.momentum() >= 0.0f && spec.momentum() < 1.0f)) {
    return Field("momentum", "must be in [0, 1)", spec.momentum());
  }
  // Nesterov without momentum is refused by job validation alone
  // (jobspec/job_validate.cc, at submit); here it is plain SGD (SgdUpdate).
  SgdOptions o;
  o.momentum = spec.momentum();
  o.nesterov = spec.nesterov();
  o.weight_decay = spec.weight_decay();
  std::unique_ptr<Optimizer> sgd(new Sgd(params, o));
  RETURN_IF_ERROR(sgd->AllocateState());
  return sgd;
}

// Adam, or AdamW with `kDecoupled` weight decay.
template <bool kDecoupled>
absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdam(const v1::OptimizerSpec& spec,
                                                    ParamSet* params) {
  AdamOptions o;
  o.beta1 = OrDefault(spec.beta1(), 0.9f);
  o.beta2 = OrDefault(spec.beta2(), 0.999f);
  o.epsilon = OrDefault(spec.epsilon(), 1e-8f);
  o.weight_decay = spec.weight_decay();
  o.decoupled = kDecoupled;
  if (!(o.beta1 > 0.0f && o.beta1 < 1.0f)) return Field("beta1", "must be in (0, 1)", o.beta1);
  if (!(o.beta2 > 0.0f && o.beta2 < 1.0f)) return Field("beta2", "must be in (0, 1)", o.beta2);
  if (!(o.epsilon > 0.0f) || !std::isfinite(o.epsilon)) {
    return Field("epsilon", "must be finite and > 0", o.epsilon);
  }
  std::unique_ptr<Optimizer> adam(new Adam(params, o));
  RETURN_IF_ERROR(adam->AllocateState());
  return adam;
}

struct OptimizerEntry {
  std::string_view name;
  absl::StatusOr<std::unique_ptr<Optimizer>> (*make)(const v1::OptimizerSpec& spec,
                                                     ParamSet* params);
};

// One maker per name of kOptimizers, in its order.
constexpr OptimizerEntry kMakers[] = {
    {"sgd", MakeSgd},
    {"adam", MakeAdam<false>},
    {"adamw", MakeAdam<true>},
};
static_assert(common::NamesMatch(kMakers, kOptimizers),
              "kMakers must make exactly kOptimizers (engine/names/engine_names.h), in its order");

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const v1::OptimizerSpec& spec,
                                                           ParamSet* params) {
  if (params == nullptr || !params->finalized()) {
    return absl::FailedPreconditionError("CreateOptimizer: the ParamSet is not finalized");
  }
  const std::string& type = spec.type();
  const OptimizerEntry* entry = nullptr;
  for (const OptimizerEntry& e : kMakers) {
    if (type == e.name) entry = &e;
  }
  if (entry == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.optimizer.type: ", type.empty() ? "required" : "unknown optimizer '" + type + "'",
        " (known: ", absl::StrJoin(KnownOptimizers(), ", "), ")"));
  }
  if (!(spec.lr() > 0.0f) || !std::isfinite(spec.lr())) {
    return Field("lr", "must be finite and > 0", spec.lr());
  }
  if (!(spec.weight_decay() >= 0.0f) || !std::isfinite(spec.weight_decay())) {
    return Field("weight_decay", "must be finite and >= 0", spec.weight_decay());
  }
  const Device device = params->flat_values().device();
  if (!device.is_cpu()) {
    ASSIGN_OR_RETURN(DeviceBackend * backend, BackendFor(device));
    return backend->CreateOptimizer(spec, params);
  }
  return entry->make(spec, params);
}

}  // namespace yoke::engine
