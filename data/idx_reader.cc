#include "data/idx_reader.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "data/input_file.h"

namespace yoke::data {

namespace {

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string Hex(uint32_t v) { return absl::StrFormat("0x%08x", v); }

// Reads `header_words` big-endian u32s and checks the first against `magic`.
absl::StatusOr<std::vector<uint32_t>> ReadHeader(InputFile& f, int header_words, uint32_t magic,
                                                 const char* what) {
  uint8_t buf[16];
  const size_t want = static_cast<size_t>(header_words) * 4;
  ASSIGN_OR_RETURN(size_t got, f.Read(buf, want));
  if (got < want) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": too short for an IDX ", what,
                                                   " header (needs ", want,
                                                   " bytes, the file holds ", got, ")"));
  }
  std::vector<uint32_t> words(header_words);
  for (int i = 0; i < header_words; ++i) words[i] = BigEndian32(buf + 4 * i);
  if (words[0] != magic) {
    std::string hint;
    if (words[0] == kIdxImagesMagic) hint = "; this is an images file";
    if (words[0] == kIdxLabelsMagic) hint = "; this is a labels file";
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": bad magic ", Hex(words[0]),
                                                   " (expected ", Hex(magic), ", an IDX ", what,
                                                   " file", hint, ")"));
  }
  return words;
}

// Reads exactly `expected` payload bytes; a short or long file is an error.
// `promise` describes what the header claimed, for the message.
absl::StatusOr<std::vector<uint8_t>> ReadPayload(InputFile& f, uint64_t expected,
                                                 const std::string& promise, size_t header_bytes) {
  std::vector<uint8_t> data;
  RETURN_IF_ERROR(f.ReadRest(&data, expected + 1));
  if (data.size() < expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": header says ", promise, " (", expected, " bytes after the ", header_bytes,
        "-byte header) but the file holds ", data.size(), " (truncated, or the header is wrong)"));
  }
  if (data.size() > expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": header says ", promise, " (", expected, " bytes after the ",
                     header_bytes, "-byte header) but the file holds more (trailing data)"));
  }
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> ReadIdx(const std::string& images_path,
                                                 const std::string& labels_path) {
  // Labels first: they are tiny, and a count mismatch is then caught before
  // the images are decompressed.
  ASSIGN_OR_RETURN(InputFile lf, InputFile::Open(labels_path));
  ASSIGN_OR_RETURN(std::vector<uint32_t> lh, ReadHeader(lf, 2, kIdxLabelsMagic, "labels"));
  const uint32_t num_labels = lh[1];
  if (num_labels == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(labels_path, ": header says 0 labels; the dataset would be empty"));
  }
  ASSIGN_OR_RETURN(std::vector<uint8_t> label_bytes,
                   ReadPayload(lf, num_labels, absl::StrCat(num_labels, " labels"), 8));

  ASSIGN_OR_RETURN(InputFile imf, InputFile::Open(images_path));
  ASSIGN_OR_RETURN(std::vector<uint32_t> ih, ReadHeader(imf, 4, kIdxImagesMagic, "images"));
  const uint32_t count = ih[1], rows = ih[2], cols = ih[3];
  if (count == 0 || rows == 0 || cols == 0) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, ": header says ", count,
                                                   " images of ", rows, "x", cols,
                                                   "; every dimension must be > 0"));
  }
  if (count != num_labels) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, " holds ", count, " images but ",
                                                   labels_path, " holds ", num_labels,
                                                   " labels; they must match"));
  }
  // Three u32 factors can overflow 64 bits; such a header can never match a
  // real file, so refuse it before asking for the payload.
  uint64_t pixels = 0, expected = 0;
  if (__builtin_mul_overflow(uint64_t{rows}, uint64_t{cols}, &pixels) ||
      __builtin_mul_overflow(pixels, uint64_t{count}, &expected) ||
      expected > (uint64_t{1} << 50)) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, ": header says ", count,
                                                   " images of ", rows, "x", cols,
                                                   ", which no file can hold"));
  }
  ASSIGN_OR_RETURN(
      std::vector<uint8_t> pixel_bytes,
      ReadPayload(imf, expected, absl::StrCat(count, " images of ", rows, "x", cols), 16));

  std::vector<int32_t> labels(label_bytes.begin(), label_bytes.end());
  const int max_label = *std::max_element(label_bytes.begin(), label_bytes.end());
  const int num_classes = std::max(10, max_label + 1);
  return std::unique_ptr<Dataset>(std::make_unique<ByteDataset>(
      std::vector<int64_t>{rows, cols, 1}, num_classes, std::move(pixel_bytes), std::move(labels)));
}

}  // namespace yoke::data
