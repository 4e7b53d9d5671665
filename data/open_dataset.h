// OpenDataset: builds the Dataset a DatasetSpec describes.
//
// Dispatches on `format` (any name of kDatasetFormats in
// data/names/format_names.h, whose DatasetFormats() this header re-exports;
// INVALID_ARGUMENT listing them for any other) to the readers, then applies
// `num_examples` as a cap (the first N examples) for every format but
// synthetic, where it is the size. Errors are the readers' (NOT_FOUND for a
// missing file, INVALID_ARGUMENT otherwise), prefixed with `field_path`
// (e.g. "data.train") so the user knows which part of the job file to fix.
#ifndef YOKE_DATA_OPEN_DATASET_H_
#define YOKE_DATA_OPEN_DATASET_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/names/format_names.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::data {

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const v1::DatasetSpec& spec,
                                                     const std::string& field_path);

}  // namespace yoke::data

#endif  // YOKE_DATA_OPEN_DATASET_H_
