// InputFile: sequential reads from a file that may be gzip-compressed.
//
// zlib's gz* functions read gzip files and pass plain files through
// unchanged, so every reader accepts both `train-images-idx3-ubyte.gz` and its
// decompressed twin through one code path. Reads are bounded by the caller:
// a header that promises 2^31 images never makes us allocate for them,
// because memory grows only with bytes actually read.
//
// Errors name the path: NOT_FOUND when it does not exist, INVALID_ARGUMENT
// when it is not a regular file or its gzip stream is corrupt.
//
// Thread-safety: an InputFile is used by one thread at a time.
#ifndef YOKE_DATA_INPUT_FILE_H_
#define YOKE_DATA_INPUT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace yoke::data {

class InputFile {
 public:
  static absl::StatusOr<InputFile> Open(const std::string& path);

  InputFile(InputFile&&) noexcept;
  InputFile& operator=(InputFile&&) noexcept;
  ~InputFile();

  // Reads up to `n` bytes into `buf`; returns how many were read, which is
  // less than `n` only at the end of the (decompressed) data.
  absl::StatusOr<size_t> Read(void* buf, size_t n);

  // Appends everything up to the end of the data to `out`, but stops once
  // `out` holds `limit` bytes: pass the expected size + 1 to learn whether a
  // file holds more than it should without reading all of it.
  absl::Status ReadRest(std::vector<uint8_t>* out, uint64_t limit);

  const std::string& path() const { return path_; }
  // Size of the file on disk (compressed size for .gz files).
  uint64_t disk_bytes() const { return disk_bytes_; }

 private:
  InputFile(std::string path, void* gz, uint64_t disk_bytes)
      : path_(std::move(path)), gz_(gz), disk_bytes_(disk_bytes) {}

  std::string path_;
  void* gz_ = nullptr;  // gzFile; void* keeps zlib.h out of this header
  uint64_t disk_bytes_ = 0;
};

// Reads the whole (decompressed) file, failing if it holds more than
// `limit` bytes.
absl::StatusOr<std::vector<uint8_t>> ReadWholeFile(const std::string& path, uint64_t limit);

}  // namespace yoke::data

#endif  // YOKE_DATA_INPUT_FILE_H_
