// CIFAR-10 binary reader (data_batch_1.bin ... data_batch_5.bin, test_batch.bin).
//
// Each file is a sequence of 3073-byte records: one label byte (0..9), then a
// 32x32 image as three 1024-byte planes (red, green, blue), row-major. We
// convert to channels-last (32, 32, 3) at load time so the pipeline never
// transposes, and keep the pixels as bytes. Several files are concatenated in
// the order given. A file whose size is not a positive multiple of 3073 or a
// label above 9 is an error naming the file (and the record).
//
// Errors: NOT_FOUND for a missing file, INVALID_ARGUMENT otherwise.
#ifndef YOKE_DATA_CIFAR_READER_H_
#define YOKE_DATA_CIFAR_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace yoke::data {

inline constexpr int kCifarSide = 32;
inline constexpr int kCifarChannels = 3;
inline constexpr int kCifarRecordBytes = 1 + kCifarSide * kCifarSide * kCifarChannels;

// Requires at least one path.
absl::StatusOr<std::unique_ptr<Dataset>> ReadCifar10(const std::vector<std::string>& paths);

}  // namespace yoke::data

#endif  // YOKE_DATA_CIFAR_READER_H_
