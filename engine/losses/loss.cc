#include "engine/losses/loss.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/device_backend.h"
#include "engine/losses/mse.h"
#include "engine/losses/softmax_cross_entropy.h"

namespace yoke::engine {

std::vector<std::string> KnownLosses() { return {"mse", "softmax_cross_entropy"}; }

absl::StatusOr<std::unique_ptr<Loss>> CreateLoss(const std::string& name, float label_smoothing,
                                                 Device device) {
  if (!(label_smoothing >= 0.0f && label_smoothing < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.label_smoothing: must be in [0, 1), got ", label_smoothing));
  }
  if (!device.is_cpu()) {
    ASSIGN_OR_RETURN(DeviceBackend * backend, BackendFor(device));
    return backend->CreateLoss(name, label_smoothing, device.index);
  }
  // Empty is TrainingSpec.loss left unset, whose documented default is this.
  if (name.empty() || name == "softmax_cross_entropy") {
    return std::unique_ptr<Loss>(new SoftmaxCrossEntropy(label_smoothing));
  }
  if (name == "mse") {
    if (label_smoothing != 0.0f) {
      return absl::InvalidArgumentError(
          "training.label_smoothing: only for loss softmax_cross_entropy, not 'mse'");
    }
    return std::unique_ptr<Loss>(new MeanSquaredError());
  }
  return absl::InvalidArgumentError(absl::StrCat("training.loss: unknown loss '", name,
                                                 "' (known: ", absl::StrJoin(KnownLosses(), ", "),
                                                 ")"));
}

}  // namespace yoke::engine
