// CheckModelForKnownInput: the checks of a job's model that need the shape of
// its input, for the jobs whose spec says that shape (synthetic data), so the
// coordinator refuses at submit what the trainer would refuse as it builds
// the model. Zoo models are expanded by the engine's own zoo code for that
// input, as the trainer expands them: the two cannot disagree. (A written-out
// `layers:` list is checked for shapes only by the engine's layers in the
// trainer; the control plane does not link them.)
//
// Thread-safety: a pure function.
#ifndef YOKE_JOBSPEC_MODEL_INPUT_CHECK_H_
#define YOKE_JOBSPEC_MODEL_INPUT_CHECK_H_

#include "absl/status/status.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::common {

// For a spec that already passed ValidateJobSpec's field checks: OK unless
// its training data is synthetic and then
//   - data.test is synthetic too, with another shape (the trainer builds one
//     model for one example shape), or
//   - model.zoo cannot be built for that shape and class count (a ResNet on
//     a 2-D input, say), with the zoo's own message.
// Both are INVALID_ARGUMENT naming the field.
absl::Status CheckModelForKnownInput(const v1::JobSpec& spec);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_MODEL_INPUT_CHECK_H_
