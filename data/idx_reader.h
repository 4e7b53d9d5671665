// IDX reader: MNIST-family image/label file pairs (MNIST, Fashion-MNIST,
// EMNIST), gzip-compressed or raw.
//
// Format (all integers big-endian u32):
//   images (idx3-ubyte): magic 0x00000803, count, rows, cols, then
//                        count*rows*cols pixel bytes, image after image.
//   labels (idx1-ubyte): magic 0x00000801, count, then count label bytes.
// A file must hold exactly the bytes its header promises: a short file, a
// header that overstates or understates the payload, and trailing bytes are
// all errors, so a truncated download never trains silently on half a set.
// The header is checked against the bytes really present before anything is
// allocated for the payload.
//
// The dataset keeps the pixels as bytes, shape (rows, cols, 1), and
// num_classes = max(10, largest label + 1) so that MNIST-style sets agree on
// 10 classes even when a subset misses one, while EMNIST letters (labels 1..26)
// still fit.
//
// Errors: NOT_FOUND for a missing file, INVALID_ARGUMENT for everything else;
// messages start with the offending path.
#ifndef YOKE_DATA_IDX_READER_H_
#define YOKE_DATA_IDX_READER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace yoke::data {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;

absl::StatusOr<std::unique_ptr<Dataset>> ReadIdx(const std::string& images_path,
                                                 const std::string& labels_path);

}  // namespace yoke::data

#endif  // YOKE_DATA_IDX_READER_H_
