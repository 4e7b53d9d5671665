// Checking the data a job names, as far as this machine can see it, before
// any trainer runs: what `yoke validate --data` and the coordinator's submit
// add to the spec rules (job_validate.h). Nothing is decoded or written (an
// image_folder cache_file is neither made nor read).
#ifndef YOKE_JOBSPEC_JOB_DATA_CHECK_H_
#define YOKE_JOBSPEC_JOB_DATA_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::common {

enum class DataCheck {
  // `yoke validate --data`: every file the job names must be here. An
  // image_folder is listed in full (the trainer's rules,
  // data/listing/image_folder_list.h); idx, cifar10 and csv files must be readable
  // regular files.
  kAll,
  // The coordinator at submit: its data often lives on the workers only, so
  // only image_folder roots that exist on this machine are checked, and each
  // class folder only up to its first image (a few directory reads per class,
  // however big the tree). Other formats are left to the trainer.
  kLocalImageFolders,
};

// One line per dataset saying what was checked (e.g. "data.train:
// image_folder /data/flowers: 5 classes, 3670 images listed"); or the first
// error, INVALID_ARGUMENT or NOT_FOUND, prefixed with the field
// ("data.test: /data/flowers/tulip: class folder 'tulip' holds no ...").
absl::StatusOr<std::vector<std::string>> CheckJobData(const v1::JobSpec& spec, DataCheck mode);

// An idx training set's example shape ({rows, cols, 1}), from its images
// file's 16-byte header (data/listing/idx_shape.h), when this machine can
// read it: the coordinator's memory estimate then counts every layer at its
// real size. Empty for other formats, a relative path (it means the
// worker's working directory), and a file that is not here or not an IDX
// images file (the trainer reports those).
std::vector<int64_t> VisibleIdxShape(const v1::JobSpec& spec);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_JOB_DATA_CHECK_H_
