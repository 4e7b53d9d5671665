// yoke::Evaluate: loss and accuracy of a model over one pass of a loader.
//
// Thread-safety: as the model and the loader.
#ifndef YOKE_EVALUATE_H_
#define YOKE_EVALUATE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace yoke {

class DataLoader;
class Model;

struct EvalResult {
  double loss = 0;      // mean softmax cross-entropy
  double accuracy = 0;  // fraction of samples whose arg-max logit is the label
  int64_t count = 0;    // samples evaluated
};

// Runs epoch 0 of `loader` (all of it, with its options; give it
// shuffle = false and world_size 1 to see the whole split in order)
// through `model` in evaluation mode (dropout off, batch norm on running
// statistics), then restores the model's mode. The loader is left at the
// end of that epoch. Errors: the model's or the loader's.
absl::StatusOr<EvalResult> Evaluate(Model& model, DataLoader& loader);

}  // namespace yoke

#endif  // YOKE_EVALUATE_H_
