// CheckModelForKnownInput: the checks of a job's model that need its layer
// list resolved, and for the jobs whose spec says the input's shape
// (synthetic data), the shape of every layer, so the coordinator refuses at
// submit what the trainer would refuse as it builds the model. Zoo models
// are expanded by the engine's own zoo code for that input, as the trainer
// expands them, and every list is checked by the engine's own shape rules
// (engine/shapes/layer_shapes.h), which Model::Create runs first: the two
// cannot disagree.
//
// Thread-safety: a pure function.
#ifndef YOKE_JOBSPEC_MODEL_INPUT_CHECK_H_
#define YOKE_JOBSPEC_MODEL_INPUT_CHECK_H_

#include "absl/status/status.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::common {

// For a spec that already passed ValidateJobSpec's field checks: OK unless
//   - a written-out `layers:` list breaks a rule of the list as a graph (an
//     output no later layer reads, but the last), whatever the data; or its
//     training data is synthetic and then
//   - data.test is synthetic too, with another shape (the trainer builds one
//     model for one example shape), or
//   - model.zoo cannot be built for that shape and class count (a ResNet on
//     a 2-D input, say), with the zoo's own message, or
//   - a layer of the list (written out or expanded from the zoo) cannot take
//     its input's shape (a kernel larger than its input, a dense layer on an
//     image), or the last layer does not output one logit per class, with
//     the engine's message naming the layer.
// All are INVALID_ARGUMENT naming the field.
absl::Status CheckModelForKnownInput(const v1::JobSpec& spec);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_MODEL_INPUT_CHECK_H_
