#include "data/cifar_reader.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/input_file.h"

namespace yoke::data {

namespace {

constexpr int kPlane = kCifarSide * kCifarSide;
constexpr int kNumClasses = 10;
// The real batches are 10000 records (30.7 MB); this only stops a runaway
// file from filling memory before its size is checked.
constexpr uint64_t kMaxCifarBytes = uint64_t{kCifarRecordBytes} * 1000000;

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> ReadCifar10(const std::vector<std::string>& paths) {
  if (paths.empty()) {
    return absl::InvalidArgumentError("cifar10: no batch files given");
  }
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> raw, ReadWholeFile(path, kMaxCifarBytes));
    if (raw.empty() || raw.size() % kCifarRecordBytes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": holds ", raw.size(), " bytes, not a positive multiple of the ",
                       kCifarRecordBytes, "-byte CIFAR-10 record (1 label + 3x32x32 pixels)"));
    }
    const size_t n = raw.size() / kCifarRecordBytes;
    const size_t base = labels.size();
    labels.resize(base + n);
    pixels.resize((base + n) * kPlane * kCifarChannels);
    for (size_t r = 0; r < n; ++r) {
      const uint8_t* rec = raw.data() + r * kCifarRecordBytes;
      if (rec[0] >= kNumClasses) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": record ", r, " has label ",
                                                       int{rec[0]}, "; CIFAR-10 labels are 0..9"));
      }
      labels[base + r] = rec[0];
      // (C, H, W) planes -> (H, W, C).
      const uint8_t* planes = rec + 1;
      uint8_t* out = pixels.data() + (base + r) * kPlane * kCifarChannels;
      for (int p = 0; p < kPlane; ++p) {
        for (int c = 0; c < kCifarChannels; ++c) {
          out[p * kCifarChannels + c] = planes[c * kPlane + p];
        }
      }
    }
  }
  return std::unique_ptr<Dataset>(
      std::make_unique<ByteDataset>(std::vector<int64_t>{kCifarSide, kCifarSide, kCifarChannels},
                                    kNumClasses, std::move(pixels), std::move(labels)));
}

}  // namespace yoke::data
