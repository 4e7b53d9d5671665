// The CUDA implementations of the losses (engine/losses/loss.h): logits,
// labels and dlogits on device `index`. CreateLoss reaches them through the
// CUDA backend (engine/device_backend.h); same names, arguments and errors.
#ifndef YOKE_ENGINE_LOSSES_CUDA_CUDA_LOSSES_H_
#define YOKE_ENGINE_LOSSES_CUDA_CUDA_LOSSES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/losses/loss.h"

namespace yoke::engine::cuda {

absl::StatusOr<std::unique_ptr<Loss>> CreateCudaLoss(const std::string& name, float label_smoothing,
                                                     int index);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_LOSSES_CUDA_CUDA_LOSSES_H_
