// Optimizer: updates a ParamSet's flat values from its flat gradients.
//
// Every optimizer works on ParamSet::flat_values()/flat_grads() as one array,
// in ONE fused, OpenMP-parallel, vectorisable pass per step, and keeps its
// per-parameter state (momentum, Adam moments) as flat arrays of the same
// layout. The alignment padding between ParamSet entries holds value 0 and
// gradient 0; updating it leaves it 0 for every optimizer here, so no loop
// needs to skip it.
//
// Checkpointing: State() returns the state arrays under stable names, as
// tensors that ALIAS the optimizer's buffers. A checkpoint writer reads them;
// a reader copies saved data into them (Tensor::CopyFrom) and calls
// set_step_count(). step_count() is part of the state (Adam's bias correction
// depends on it).
//
// Thread-safety: one Optimizer belongs to one replica; not thread-safe.
#ifndef YOKE_ENGINE_OPTIM_OPTIMIZER_H_
#define YOKE_ENGINE_OPTIM_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/names/engine_names.h"
#include "engine/param_set.h"
#include "engine/tensor.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::engine {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Its name in kOptimizers (engine/names/engine_names.h).
  virtual const char* type() const = 0;

  // Applies one update with learning rate `lr` (from the schedule) and
  // increments step_count(). The update uses grad_scale * flat_grads() as the
  // gradient, folded into the same fused pass: the data-parallel trainer sums
  // d(sum of per-sample losses)/dθ over the ranks and passes 1 / (global
  // sample count) here, instead of a separate scaling pass. Requires the
  // ParamSet to be finalized on the CPU (FAILED_PRECONDITION otherwise), a
  // finite lr >= 0 and a finite grad_scale > 0 (INVALID_ARGUMENT).
  virtual absl::Status Step(float lr, float grad_scale) = 0;
  absl::Status Step(float lr) { return Step(lr, 1.0f); }

  // Named state arrays, each (padded_size,) aliasing the optimizer's
  // buffers; empty for stateless plain SGD. Names are stable across versions
  // ("momentum"; "exp_avg", "exp_avg_sq").
  virtual std::vector<std::pair<std::string, Tensor>> State() const = 0;

  // Allocates the state arrays (zeroed). CreateOptimizer calls it once;
  // RESOURCE_EXHAUSTED "out of memory: N bytes for optimizer momentum ..."
  // when they do not fit.
  virtual absl::Status AllocateState() { return absl::OkStatus(); }

  // Completed Step() calls (restored from a checkpoint with the setter).
  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t n) { step_count_ = n; }

 protected:
  explicit Optimizer(ParamSet* params) : params_(params) {}
  // Shared precondition checks of Step().
  absl::Status CheckStep(float lr, float grad_scale = 1.0f) const;

  ParamSet* params_;
  int64_t step_count_ = 0;
};

// Creates the optimizer `spec.type` names over the finalized `params`: any
// name of kOptimizers (engine/names/engine_names.h, whose KnownOptimizers()
// this header re-exports). Errors: INVALID_ARGUMENT naming the field
// (training.optimizer.type with the known values for any other type;
// training.optimizer.lr, .momentum, ... for out-of-range hyper-parameters);
// FAILED_PRECONDITION if `params` is not finalized. Rules between fields
// (nesterov needs momentum, ...) are job validation's (jobspec/).
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const v1::OptimizerSpec& spec,
                                                           ParamSet* params);

// Gradient clipping by global norm (TrainingSpec.clip_grad_norm).
//
// GradNorm: the L2 norm of grad_scale * flat_grads() over every parameter
// together (the padding holds zeros), accumulated in double; one parallel
// pass. Requires a finalized CPU ParamSet.
double GradNorm(const ParamSet& params, float grad_scale);
// The factor to multiply the gradient by: max_norm / (norm + 1e-6) when
// norm > max_norm, else 1; max_norm <= 0 means no clipping (also 1). This is
// torch.nn.utils.clip_grad_norm_'s definition, so the clipped norm is just
// below max_norm.
float ClipFactor(double norm, float max_norm);

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_OPTIM_OPTIMIZER_H_
