// JobSpec validation: the one set of rules that `yoke train` and the
// coordinator both apply before a job runs or is stored.
//
// It checks what can be checked from the spec alone: required sections, value
// ranges, known names (zoo models, optimizers and schedules from
// engine/names/, dataset formats from data/names/, the lists the factories
// themselves are checked against; padding, crop, ... from here), the
// fields each dataset format needs, and the layer graph's names and inputs.
// A layer's arguments, and its shape against its input's where the spec gives
// the input's shape (synthetic data), are checked by the engine's own rules
// (engine/shapes/layer_shapes.h, through model_input_check.h), which the
// trainer applies again when it builds the model. Which directories a spec's
// paths may name is path_confinement.h's job.
//
// Errors are INVALID_ARGUMENT. Every problem found is reported, joined with
// "; ", each naming the field path, the value and what was expected, e.g.
//   training.batch_size: must be > 0, got -64
//   model.zoo: unknown model 'resnet51' (known: cnn, mlp, resnet18, resnet20, ...)
//
// Thread-safety: pure functions; safe from any thread.
#ifndef YOKE_JOBSPEC_JOB_VALIDATE_H_
#define YOKE_JOBSPEC_JOB_VALIDATE_H_

#include <string>

#include "absl/status/status.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::common {

// Limits that keep a job's spec small enough for every daemon and table that
// carries it (the coordinator's store, heartbeat replies, `yoke jobs`).
inline constexpr size_t kMaxSubmitSpecBytes = 1 << 20;  // serialized (files: kMaxJobSpecBytes)
inline constexpr size_t kMaxJobNameChars = 256;
inline constexpr int kMaxTrainingThreads = 1024;

// OK when `spec` satisfies every rule in docs/job_spec.md; otherwise
// INVALID_ARGUMENT listing all violations.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// The directory global rank 0 writes TensorBoard event files to:
// logging.tensorboard_dir, else <checkpoint.dir>/tensorboard; "" for none
// ("off", or neither set).
std::string TensorBoardDir(const v1::JobSpec& spec);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_JOB_VALIDATE_H_
