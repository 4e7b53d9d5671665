#include "engine/optim/cuda/cuda_optimizers.h"

namespace yoke::engine::cuda {

absl::StatusOr<std::unique_ptr<Optimizer>> CreateCudaOptimizer(const v1::OptimizerSpec& spec,
                                                               ParamSet* params) {
  (void)params;
  return absl::UnimplementedError("optimizer '" + spec.type() + "' has no CUDA implementation yet");
}

absl::StatusOr<double> CudaGradNorm(const ParamSet& params, float grad_scale) {
  (void)params;
  (void)grad_scale;
  return absl::UnimplementedError("GradNorm has no CUDA implementation yet");
}

}  // namespace yoke::engine::cuda
