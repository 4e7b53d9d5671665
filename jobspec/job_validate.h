// JobSpec validation: the one set of rules that `yoke train` and the
// coordinator both apply before a job runs or is stored.
//
// It checks what can be checked from the spec alone: required sections, value
// ranges, known names (zoo models, dataset formats, optimizers, ...), the
// fields each dataset format needs, and the layer graph's names and inputs.
// Shape compatibility between layers needs the engine and is checked when the
// model is built (engine/model.h).
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
#include <vector>

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

// The model.zoo names validation accepts. jobspec/ may not depend on the
// engine, so this is a copy of engine::ZooNames(); engine/model_zoo_test
// fails when the two differ.
const std::vector<std::string>& KnownZooModels();

// Confines the files a job may touch (dataset files, checkpoint dir) to
// `allowed_roots`, absolute directories. Paths and roots are compared in
// canonical form: symlinks are resolved as far as the path exists on this
// machine (std::filesystem::weakly_canonical), the rest is normalised
// lexically ("a/./b/../c" -> "a/c"). So a symlink inside a root that points
// outside it is refused wherever this runs: at submit on the coordinator, and
// in the trainer, just before it opens anything, on the worker. With roots
// given, a relative path is rejected because its meaning depends on the
// worker's working directory. Empty `allowed_roots` allows everything.
// INVALID_ARGUMENT naming the field (e.g. data.train.files[1]) or a root that
// is not absolute.
absl::Status ValidatePathsUnder(const v1::JobSpec& spec,
                                const std::vector<std::string>& allowed_roots);

// ValidatePathsUnder for both kinds of path: the dataset files under
// `data_roots`; the checkpoint and TensorBoard dirs and the image cache files
// (data.*.cache_file, written by the trainer) under `checkpoint_roots`.
absl::Status ValidateJobPaths(const v1::JobSpec& spec, const std::vector<std::string>& data_roots,
                              const std::vector<std::string>& checkpoint_roots);

// The directory global rank 0 writes TensorBoard event files to:
// logging.tensorboard_dir, else <checkpoint.dir>/tensorboard; "" for none
// ("off", or neither set).
std::string TensorBoardDir(const v1::JobSpec& spec);

// Lexically normalises `path`: collapses "//" and ".", resolves ".." against
// the preceding component ("/.." stays "/"), drops a trailing "/". Exposed for
// tests.
std::string NormalizePath(const std::string& path);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_JOB_VALIDATE_H_
