// ImageCacheFile: decoded, resized images of one dataset kept in one file,
// filled lazily as the images are first decoded and reused by later epochs,
// attempts, runs and by every rank on the host.
//
// Layout (little-endian; offsets in bytes):
//   [0, 4096)        header: magic "YOKEIMC1", version, the dataset's 128-bit
//                    key, count, entry_bytes, table and data offsets, and a
//                    CRC-32 of the header's fields;
//   [4096, data)     table: one u64 per entry, 0 while empty, else
//                    (1 << 32) | CRC-32 of the entry's bytes;
//   [data, end)      count entries of entry_bytes each (data is 4096-aligned).
// The file is made at full size (sparse) with an empty table.
//
// Why it is safe:
//   - Stale or foreign: the key (ImageFolderDataset hashes the file list with
//     sizes and mtimes, image_size, channels, the resize filter's version)
//     must match, or the file is rebuilt with a warning naming the reason. A
//     file at the path that does not start with the magic (not a cache: a
//     typo'd path naming real data) is never overwritten: Open fails instead.
//   - Creation is atomic: under an exclusive flock on PATH.lock, the header
//     is checked, and a rebuild is written to a unique temporary name
//     in the same directory, fsynced and renamed over PATH, so no process
//     ever opens a half-written header; concurrent openers (ranks on one
//     host) serialise on the lock and the later ones reuse the first's file.
//   - Filling writes an entry's bytes, then its table word. Entries are pure
//     functions of the key, so two ranks filling one entry write the same
//     bytes. A read checks the word's CRC against the bytes it read, so a
//     crash or power loss between the two writes, a torn write, a truncated
//     or a scribbled-on file reads as a miss (decoded again and rewritten,
//     with a warning), not as wrong pixels (a random corruption slips past a
//     CRC-32 once in 2^32).
//   - Memory: reads are pread()s into the caller's buffer; nothing is mapped
//     or held beyond the header.
//
// Thread-safety: Read and Write are const and safe from many threads.
#ifndef YOKE_DATA_IMAGE_CACHE_FILE_H_
#define YOKE_DATA_IMAGE_CACHE_FILE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace yoke::data {

struct ImageCacheKey {
  uint64_t hi = 0, lo = 0;
  bool operator==(const ImageCacheKey& o) const { return hi == o.hi && lo == o.lo; }
};

// A stable 128-bit hash (two FNV-1a 64 streams), fed piece by piece so a
// long file list need not be held whole: the same on every machine and run,
// unlike absl::Hash. Not cryptographic.
class CacheKeyHasher {
 public:
  void Add(absl::string_view bytes);
  ImageCacheKey key() const { return {a_, b_}; }

 private:
  uint64_t a_ = 0xcbf29ce484222325ull, b_ = 0x84222325cbf29ce4ull;
};

// CacheKeyHasher over `material` alone.
ImageCacheKey HashCacheKey(absl::string_view material);

class ImageCacheFile {
 public:
  static constexpr uint32_t kVersion = 1;

  // Opens the cache at `path` for (key, count, entry_bytes), reusing a valid
  // file and rebuilding a stale, truncated or corrupt one (warned). Makes
  // the parent directories. Errors (INVALID_ARGUMENT / the errno's) name the
  // path: a directory that cannot be made or written, a foreign file.
  static absl::StatusOr<std::unique_ptr<ImageCacheFile>> Open(const std::string& path,
                                                              ImageCacheKey key, int64_t count,
                                                              int64_t entry_bytes);
  ~ImageCacheFile();
  ImageCacheFile(const ImageCacheFile&) = delete;
  ImageCacheFile& operator=(const ImageCacheFile&) = delete;

  // True with `out` (entry_bytes) filled when entry i is stored and its
  // bytes match their CRC; false otherwise (a corrupt entry is warned).
  bool Read(int64_t i, uint8_t* out) const;
  // Stores entry i. A failed write (disk full) is warned once and turns
  // later writes off; reading goes on.
  void Write(int64_t i, const uint8_t* data) const;

  const std::string& path() const { return path_; }
  // Whether Open found a valid file (false: it built a new one).
  bool reused() const { return reused_; }
  // Entries found and not found (or corrupt) by Read so far.
  int64_t hits() const { return hits_.load(); }
  int64_t misses() const { return misses_.load(); }

 private:
  ImageCacheFile() = default;

  std::string path_;
  int fd_ = -1;
  bool reused_ = false;
  bool writable_ = true;
  int64_t count_ = 0;
  int64_t entry_bytes_ = 0;
  uint64_t data_offset_ = 0;
  mutable std::atomic<bool> write_failed_{false};
  mutable std::atomic<bool> warned_corrupt_{false};
  mutable std::atomic<int64_t> hits_{0}, misses_{0};
};

}  // namespace yoke::data

#endif  // YOKE_DATA_IMAGE_CACHE_FILE_H_
