#include "data/listing/idx_shape.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace yoke::common {
namespace {

uint32_t BigEndian(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> IdxImageShape(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such IDX file"));
  }
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  unsigned char header[16] = {};
  const int n = gzread(gz, header, sizeof(header));
  gzclose(gz);
  if (n != static_cast<int>(sizeof(header))) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": an IDX images header is 16 bytes; the file holds ", n < 0 ? 0 : n));
  }
  const uint32_t magic = BigEndian(header);
  if (magic != 0x00000803) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": magic 0x",
                                                   absl::Hex(magic, absl::kZeroPad8),
                                                   " is not an IDX images file's (0x00000803)"));
  }
  const uint32_t rows = BigEndian(header + 8), cols = BigEndian(header + 12);
  if (rows == 0 || cols == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": images of ", rows, "x", cols, " pixels"));
  }
  return std::vector<int64_t>{rows, cols, 1};
}

}  // namespace yoke::common
