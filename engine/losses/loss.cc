#include "engine/losses/loss.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/losses/mse.h"
#include "engine/losses/softmax_cross_entropy.h"

namespace yoke::engine {

std::vector<std::string> KnownLosses() { return {"mse", "softmax_cross_entropy"}; }

absl::StatusOr<std::unique_ptr<Loss>> CreateLoss(const std::string& name) {
  // Empty is TrainingSpec.loss left unset, whose documented default is this.
  if (name.empty() || name == "softmax_cross_entropy") return std::unique_ptr<Loss>(new SoftmaxCrossEntropy());
  if (name == "mse") return std::unique_ptr<Loss>(new MeanSquaredError());
  return absl::InvalidArgumentError(absl::StrCat("training.loss: unknown loss '", name, "' (known: ",
                                                 absl::StrJoin(KnownLosses(), ", "), ")"));
}

}  // namespace yoke::engine
