#include "data/input_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace yoke::data {

namespace {

// Largest single gzread; its per-call overhead is negligible at this size.
constexpr size_t kChunk = size_t{1} << 22;
// Smallest growth step of ReadRest's buffer.
constexpr size_t kMinGrow = size_t{1} << 16;

// Most of our inputs compress by 2-5x; reserving a multiple of the disk size
// avoids repeated regrowth without trusting a header's claims.
constexpr uint64_t kReserveRatio = 8;

absl::Status GzError(const std::string& path, gzFile gz) {
  int errnum = 0;
  const char* msg = gzerror(gz, &errnum);
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": cannot read: ", errnum == Z_ERRNO ? std::strerror(errno) : msg));
}

}  // namespace

absl::StatusOr<InputFile> InputFile::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(e));
    if (e == ENOENT || e == ENOTDIR) return absl::NotFoundError(msg);
    return absl::InvalidArgumentError(msg);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  gzbuffer(gz, 1 << 17);
  return InputFile(path, gz, static_cast<uint64_t>(st.st_size));
}

InputFile::InputFile(InputFile&& o) noexcept
    : path_(std::move(o.path_)), gz_(o.gz_), disk_bytes_(o.disk_bytes_) {
  o.gz_ = nullptr;
}

InputFile& InputFile::operator=(InputFile&& o) noexcept {
  if (this != &o) {
    if (gz_ != nullptr) gzclose(static_cast<gzFile>(gz_));
    path_ = std::move(o.path_);
    gz_ = o.gz_;
    disk_bytes_ = o.disk_bytes_;
    o.gz_ = nullptr;
  }
  return *this;
}

InputFile::~InputFile() {
  if (gz_ != nullptr) gzclose(static_cast<gzFile>(gz_));
}

absl::StatusOr<size_t> InputFile::Read(void* buf, size_t n) {
  auto* gz = static_cast<gzFile>(gz_);
  size_t total = 0;
  while (total < n) {
    const unsigned want = static_cast<unsigned>(std::min(n - total, kChunk));
    const int got = gzread(gz, static_cast<char*>(buf) + total, want);
    if (got < 0) return GzError(path_, gz);
    if (got == 0) break;
    total += static_cast<size_t>(got);
  }
  return total;
}

absl::Status InputFile::ReadRest(std::vector<uint8_t>* out, uint64_t limit) {
  const uint64_t hint = std::min(limit, disk_bytes_ * kReserveRatio + kMinGrow);
  if (hint > out->size()) out->reserve(hint);
  while (out->size() < limit) {
    const size_t old = out->size();
    // Grow into the reserved capacity first: resize() zero-fills, so asking
    // for far more than the file holds would cost time for nothing.
    const size_t room = std::max(out->capacity() - old, kMinGrow);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(limit - old, room));
    out->resize(old + want);
    absl::StatusOr<size_t> got = Read(out->data() + old, want);
    if (!got.ok()) {
      out->resize(old);
      return got.status();
    }
    out->resize(old + *got);
    if (*got < want) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& path, uint64_t limit) {
  ASSIGN_OR_RETURN(InputFile f, InputFile::Open(path));
  std::vector<uint8_t> out;
  RETURN_IF_ERROR(f.ReadRest(&out, limit + 1));
  if (out.size() > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": larger than the limit of ", limit, " bytes"));
  }
  return out;
}

}  // namespace yoke::data
