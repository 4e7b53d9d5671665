#include "data/image_cache_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace yoke::data {

namespace {

constexpr char kMagic[8] = {'Y', 'O', 'K', 'E', 'I', 'M', 'C', '1'};
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kFilled = uint64_t{1} << 32;
// Bytes [0, kHeaderFields) hold the fields; the CRC follows them.
constexpr size_t kHeaderFields = 64;

struct Header {
  uint32_t version = ImageCacheFile::kVersion;
  uint32_t header_bytes = kHeaderBytes;
  ImageCacheKey key;
  int64_t count = 0;
  int64_t entry_bytes = 0;
  uint64_t table_offset = kHeaderBytes;
  uint64_t data_offset = 0;
};

uint32_t Crc(const uint8_t* p, size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  // zlib takes a uInt length: feed large buffers in pieces.
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = crc32(c, p, piece);
    p += piece;
    n -= piece;
  }
  return static_cast<uint32_t>(c);
}

void Put(uint8_t* buf, size_t at, const void* v, size_t n) { std::memcpy(buf + at, v, n); }
void Get(const uint8_t* buf, size_t at, void* v, size_t n) { std::memcpy(v, buf + at, n); }

void Encode(const Header& h, uint8_t* buf) {
  std::memset(buf, 0, kHeaderBytes);
  Put(buf, 0, kMagic, 8);
  Put(buf, 8, &h.version, 4);
  Put(buf, 12, &h.header_bytes, 4);
  Put(buf, 16, &h.key.hi, 8);
  Put(buf, 24, &h.key.lo, 8);
  Put(buf, 32, &h.count, 8);
  Put(buf, 40, &h.entry_bytes, 8);
  Put(buf, 48, &h.table_offset, 8);
  Put(buf, 56, &h.data_offset, 8);
  const uint32_t crc = Crc(buf, kHeaderFields);
  Put(buf, kHeaderFields, &crc, 4);
}

// Reads exactly n bytes at off; false on a short read or an error.
bool PreadAll(int fd, void* out, size_t n, uint64_t off) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}

bool PwriteAll(int fd, const void* in, size_t n, uint64_t off) {
  const auto* p = static_cast<const uint8_t*>(in);
  while (n > 0) {
    const ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}

absl::Status ErrnoError(const std::string& path, const std::string& what, int err) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": image cache: cannot ", what, " (", std::strerror(err), ")"));
}

// The layout for (key, count, entry_bytes); false if its size overflows.
bool Layout(ImageCacheKey key, int64_t count, int64_t entry_bytes, Header* h, uint64_t* size) {
  h->key = key;
  h->count = count;
  h->entry_bytes = entry_bytes;
  uint64_t table_end = 0, data_bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(count), uint64_t{8}, &table_end) ||
      __builtin_add_overflow(table_end, kHeaderBytes, &table_end) ||
      __builtin_mul_overflow(static_cast<uint64_t>(count), static_cast<uint64_t>(entry_bytes),
                             &data_bytes)) {
    return false;
  }
  h->data_offset = (table_end + kHeaderBytes - 1) / kHeaderBytes * kHeaderBytes;
  return !__builtin_add_overflow(h->data_offset, data_bytes, size) &&
         *size <= static_cast<uint64_t>(INT64_MAX);
}

enum class Verdict { kValid, kStale, kForeign };

// Checks the open file against the expected header; `reason` says why not.
Verdict Check(int fd, const Header& want, uint64_t want_size, std::string* reason) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    *reason = absl::StrCat("cannot stat (", std::strerror(errno), ")");
    return Verdict::kStale;
  }
  uint8_t buf[kHeaderBytes];
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const size_t have = static_cast<size_t>(std::min<uint64_t>(size, kHeaderBytes));
  if (have > 0 && !PreadAll(fd, buf, have, 0)) {
    *reason = absl::StrCat("cannot read the header (", std::strerror(errno), ")");
    return Verdict::kStale;
  }
  // A file whose first bytes are not (a prefix of) the magic was not written
  // here: it is never overwritten.
  if (std::memcmp(buf, kMagic, std::min<size_t>(have, sizeof(kMagic))) != 0) {
    *reason = "exists and is not a Yoke image cache";
    return Verdict::kForeign;
  }
  if (have < kHeaderBytes) {
    *reason = absl::StrCat("truncated: ", size, " bytes, shorter than its header");
    return Verdict::kStale;
  }
  uint32_t crc = 0;
  Get(buf, kHeaderFields, &crc, 4);
  if (crc != Crc(buf, kHeaderFields)) {
    *reason = "corrupt header (checksum mismatch)";
    return Verdict::kStale;
  }
  Header h;
  Get(buf, 8, &h.version, 4);
  Get(buf, 12, &h.header_bytes, 4);
  Get(buf, 16, &h.key.hi, 8);
  Get(buf, 24, &h.key.lo, 8);
  Get(buf, 32, &h.count, 8);
  Get(buf, 40, &h.entry_bytes, 8);
  Get(buf, 48, &h.table_offset, 8);
  Get(buf, 56, &h.data_offset, 8);
  if (h.version != want.version) {
    *reason = absl::StrCat("format version ", h.version, ", this build writes ", want.version);
    return Verdict::kStale;
  }
  if (!(h.key == want.key) || h.count != want.count || h.entry_bytes != want.entry_bytes) {
    *reason = absl::StrCat("made for other data (", h.count, " images of ", h.entry_bytes,
                           " bytes, key ", absl::Hex(h.key.hi, absl::kZeroPad16),
                           absl::Hex(h.key.lo, absl::kZeroPad16), "; now ", want.count, " of ",
                           want.entry_bytes, ", key ", absl::Hex(want.key.hi, absl::kZeroPad16),
                           absl::Hex(want.key.lo, absl::kZeroPad16),
                           "): an image, the file list, image_size or channels changed");
    return Verdict::kStale;
  }
  if (h.header_bytes != want.header_bytes || h.table_offset != want.table_offset ||
      h.data_offset != want.data_offset) {
    *reason = "corrupt header (inconsistent offsets)";
    return Verdict::kStale;
  }
  if (size != want_size) {
    *reason = absl::StrCat("truncated or extended: ", size, " bytes, expected ", want_size);
    return Verdict::kStale;
  }
  return Verdict::kValid;
}

// Holds an exclusive flock for its lifetime.
class LockFile {
 public:
  ~LockFile() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  absl::Status Lock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    // A read-only directory (a cache shared read-only): lock the lock file
    // if it is there, else go on unlocked; nothing can be built there, and
    // a writer elsewhere only ever renames whole files into place.
    if (fd_ < 0 && (errno == EACCES || errno == EROFS)) {
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) return absl::OkStatus();
    }
    if (fd_ < 0) return ErrnoError(path, "create its lock file", errno);
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) return ErrnoError(path, "lock", errno);
    }
    return absl::OkStatus();
  }

 private:
  int fd_ = -1;
};

std::atomic<uint64_t> temp_counter{0};

// Writes a fresh, empty cache to a unique temporary name, then renames it
// over `path`: readers see the old file or the whole new header.
absl::Status Build(const std::string& path, const Header& h, uint64_t size) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", temp_counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(tmp, "create", errno);
  uint8_t buf[kHeaderBytes];
  Encode(h, buf);
  int err = 0;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    err = errno;
  } else if (!PwriteAll(fd, buf, kHeaderBytes, 0)) {
    err = errno ? errno : EIO;
  } else if (::fsync(fd) != 0) {
    err = errno;
  }
  ::close(fd);
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return ErrnoError(path, absl::StrCat("write a new cache of ", size, " bytes"), err);
  }
  return absl::OkStatus();
}

}  // namespace

// FNV-1a 64 with the standard offset basis, and a second stream with
// another basis and input: 128 bits, so that two datasets' keys collide by
// accident with negligible odds. It detects change; it is no defence against
// a file list crafted to collide (whoever can write the cache file can write
// any pixels into it anyway).
void CacheKeyHasher::Add(absl::string_view bytes) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  for (unsigned char ch : bytes) {
    a_ = (a_ ^ ch) * kPrime;
    b_ = (b_ ^ (ch ^ 0x5a)) * kPrime;
  }
}

ImageCacheKey HashCacheKey(absl::string_view material) {
  CacheKeyHasher h;
  h.Add(material);
  return h.key();
}

absl::StatusOr<std::unique_ptr<ImageCacheFile>> ImageCacheFile::Open(const std::string& path,
                                                                     ImageCacheKey key,
                                                                     int64_t count,
                                                                     int64_t entry_bytes) {
  if (count <= 0 || entry_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": image cache: nothing to cache (", count,
                                                   " images of ", entry_bytes, " bytes)"));
  }
  Header want;
  uint64_t size = 0;
  if (!Layout(key, count, entry_bytes, &want, &size)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": image cache: ", count, " images of ",
                                                   entry_bytes, " bytes do not fit in one file"));
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(path,
                                                     ": image cache: cannot make its directory ",
                                                     parent.string(), " (", ec.message(), ")"));
    }
  }
  // Every opener of this path, in any process, checks and (re)builds under
  // the lock, so one builds and the others reuse its file.
  LockFile lock;
  if (absl::Status s = lock.Lock(path + ".lock"); !s.ok()) return s;

  std::unique_ptr<ImageCacheFile> f(new ImageCacheFile());
  f->path_ = path;
  f->count_ = count;
  f->entry_bytes_ = entry_bytes;
  f->data_offset_ = want.data_offset;
  // O_NONBLOCK: a FIFO at the path must not hang the open; anything but a
  // regular file is refused below.
  f->fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (f->fd_ < 0 && (errno == EACCES || errno == EROFS)) {
    f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    f->writable_ = false;
  }
  if (f->fd_ >= 0) {
    struct stat st;
    if (::fstat(f->fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": image cache: not a regular file; refusing to use it"));
    }
    std::string reason;
    const Verdict v = Check(f->fd_, want, size, &reason);
    if (v == Verdict::kValid) {
      f->reused_ = true;
      if (!f->writable_) {
        spdlog::warn("image cache {}: read-only; images not in it are decoded, not stored", path);
      }
      return f;
    }
    if (v == Verdict::kForeign) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": image cache: ", reason,
                       "; refusing to overwrite it (remove it, or choose another cache_file)"));
    }
    ::close(f->fd_);
    f->fd_ = -1;
    if (!f->writable_) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": image cache: ", reason, ", and the file is read-only"));
    }
    spdlog::warn("image cache {}: {}; rebuilding it", path, reason);
  } else if (errno != ENOENT) {
    return ErrnoError(path, "open", errno);
  }
  f->writable_ = true;
  if (absl::Status s = Build(path, want, size); !s.ok()) return s;
  f->fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (f->fd_ < 0) return ErrnoError(path, "open the new cache", errno);
  std::string reason;
  if (Check(f->fd_, want, size, &reason) != Verdict::kValid) {
    return absl::InternalError(absl::StrCat(path, ": image cache: just written, but ", reason));
  }
  return f;
}

ImageCacheFile::~ImageCacheFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool ImageCacheFile::Read(int64_t i, uint8_t* out) const {
  uint64_t word = 0;
  if (i < 0 || i >= count_ ||
      !PreadAll(fd_, &word, 8, kHeaderBytes + 8 * static_cast<uint64_t>(i)) || word == 0) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const uint64_t off =
      data_offset_ + static_cast<uint64_t>(i) * static_cast<uint64_t>(entry_bytes_);
  const bool ok = (word >> 32) == 1 && PreadAll(fd_, out, static_cast<size_t>(entry_bytes_), off) &&
                  Crc(out, static_cast<size_t>(entry_bytes_)) == static_cast<uint32_t>(word);
  if (!ok) {
    if (!warned_corrupt_.exchange(true)) {
      spdlog::warn(
          "image cache {}: entry {} is corrupt or truncated; decoding it again "
          "(warned once per cache)",
          path_, i);
    }
    misses_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ImageCacheFile::Write(int64_t i, const uint8_t* data) const {
  if (!writable_ || i < 0 || i >= count_ || write_failed_.load(std::memory_order_relaxed)) return;
  const uint64_t off =
      data_offset_ + static_cast<uint64_t>(i) * static_cast<uint64_t>(entry_bytes_);
  const uint64_t word = kFilled | Crc(data, static_cast<size_t>(entry_bytes_));
  // The bytes first, then the word that vouches for them.
  errno = 0;
  if (!PwriteAll(fd_, data, static_cast<size_t>(entry_bytes_), off) ||
      !PwriteAll(fd_, &word, 8, kHeaderBytes + 8 * static_cast<uint64_t>(i))) {
    const int err = errno ? errno : EIO;
    if (!write_failed_.exchange(true)) {
      spdlog::warn("image cache {}: cannot write ({}); not storing more images in it", path_,
                   std::strerror(err));
    }
  }
}

}  // namespace yoke::data
