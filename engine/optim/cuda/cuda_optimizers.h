// The CUDA implementations of the optimizers (engine/optim/optimizer.h) over
// a ParamSet finalized on a CUDA device, and GradNorm of such a set.
// CreateOptimizer reaches them through the CUDA backend
// (engine/device_backend.h); same names, arguments and errors.
#ifndef YOKE_ENGINE_OPTIM_CUDA_CUDA_OPTIMIZERS_H_
#define YOKE_ENGINE_OPTIM_CUDA_CUDA_OPTIMIZERS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "engine/optim/optimizer.h"

namespace yoke::engine::cuda {

absl::StatusOr<std::unique_ptr<Optimizer>> CreateCudaOptimizer(const v1::OptimizerSpec& spec,
                                                               ParamSet* params);
absl::StatusOr<double> CudaGradNorm(const ParamSet& params, float grad_scale);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_OPTIM_CUDA_CUDA_OPTIMIZERS_H_
