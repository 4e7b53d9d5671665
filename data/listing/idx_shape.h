// An IDX images file's example shape, from its 16-byte header alone: for
// the coordinator's memory estimate at submit (jobspec/memory_estimate.h),
// which does not link data/ and must not read a whole data set. The file
// may be gzip-compressed or raw (zlib reads both). The trainer's reader
// (data/idx_reader.h) checks the rest of the file when it opens it.
#ifndef YOKE_DATA_LISTING_IDX_SHAPE_H_
#define YOKE_DATA_LISTING_IDX_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace yoke::common {

// {rows, cols, 1}: the shape data::ReadIdx gives each example of `path`.
// NOT_FOUND for a missing file; INVALID_ARGUMENT, starting with the path,
// for a short header, a magic that is not an IDX images file's (0x00000803)
// or a zero size.
absl::StatusOr<std::vector<int64_t>> IdxImageShape(const std::string& path);

}  // namespace yoke::common

#endif  // YOKE_DATA_LISTING_IDX_SHAPE_H_
