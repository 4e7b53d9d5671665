#include "engine/losses/cuda/cuda_losses.h"

namespace yoke::engine::cuda {

absl::StatusOr<std::unique_ptr<Loss>> CreateCudaLoss(const std::string& name, float label_smoothing,
                                                     int index) {
  (void)label_smoothing;
  (void)index;
  return absl::UnimplementedError("loss '" + name + "' has no CUDA implementation yet");
}

}  // namespace yoke::engine::cuda
