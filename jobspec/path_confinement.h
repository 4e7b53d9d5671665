// Path confinement: which files a job may touch. A coordinator or worker
// started with data and checkpoint roots refuses a spec whose dataset files,
// checkpoint or TensorBoard dir or image cache files lie outside them, with
// `..` and symlinks resolved first, so neither can be used to escape.
//
// Thread-safety: pure functions (they read the file system to resolve
// symlinks); safe from any thread.
#ifndef YOKE_JOBSPEC_PATH_CONFINEMENT_H_
#define YOKE_JOBSPEC_PATH_CONFINEMENT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::common {

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
// is not absolute; every path outside is reported, joined with "; ".
absl::Status ValidatePathsUnder(const v1::JobSpec& spec,
                                const std::vector<std::string>& allowed_roots);

// ValidatePathsUnder for both kinds of path: the dataset files under
// `data_roots`; the checkpoint and TensorBoard dirs and the image cache files
// (data.*.cache_file, written by the trainer) under `checkpoint_roots`.
absl::Status ValidateJobPaths(const v1::JobSpec& spec, const std::vector<std::string>& data_roots,
                              const std::vector<std::string>& checkpoint_roots);

// Lexically normalises `path`: collapses "//" and ".", resolves ".." against
// the preceding component ("/.." stays "/"), drops a trailing "/". Also used
// by validation to compare the two datasets' cache files.
std::string NormalizePath(const std::string& path);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_PATH_CONFINEMENT_H_
