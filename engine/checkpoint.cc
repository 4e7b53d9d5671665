#include "engine/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/quote.h"
#include "common/status.h"

namespace yoke::engine {
namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::StatusOr<DType> ParseDType(const std::string& s) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32, DType::kI64, DType::kU8}) {
    if (s == DTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", common::Quote(s, 16)));
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

const Tensor* Checkpoint::Find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Open(
    const std::string& path, v1::CheckpointHeader header, const std::vector<TensorDecl>& tensors) {
  header.clear_tensors();
  uint64_t offset = 0;
  absl::flat_hash_set<std::string> declared;
  for (const TensorDecl& t : tensors) {
    if (!declared.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", path, ": tensor ", common::Quote(t.name, 64), " is declared twice"));
    }
    v1::TensorRecord* r = header.add_tensors();
    r->set_name(t.name);
    r->set_dtype(DTypeName(t.dtype));
    for (int64_t d : t.shape) r->add_shape(d);
    r->set_offset(offset);
    const uint64_t bytes = static_cast<uint64_t>(NumElements(t.shape)) * DTypeSize(t.dtype);
    r->set_bytes(bytes);
    offset += bytes;
  }
  std::string hdr;
  if (!header.SerializeToString(&hdr)) {
    return absl::InternalError("cannot serialize the checkpoint header");
  }
  std::unique_ptr<CheckpointWriter> w(new CheckpointWriter());
  w->path_ = path;
  w->tmp_ = path + ".tmp";
  w->data_bytes_ = offset;
  w->fd_ = ::open(w->tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return ErrnoError("cannot create", w->tmp_);
  w->crc_ = crc32(0L, Z_NULL, 0);
  const uint32_t version = kCheckpointVersion;
  const uint32_t hdr_len = static_cast<uint32_t>(hdr.size());
  RETURN_IF_ERROR(w->Put(kCheckpointMagic, sizeof(kCheckpointMagic)));
  RETURN_IF_ERROR(w->Put(&version, sizeof(version)));
  RETURN_IF_ERROR(w->Put(&hdr_len, sizeof(hdr_len)));
  RETURN_IF_ERROR(w->Put(hdr.data(), hdr.size()));
  return w;
}

CheckpointWriter::~CheckpointWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

absl::Status CheckpointWriter::Put(const void* data, size_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError("checkpoint writer is closed");
  // zlib's crc32 takes a uInt length; feed it in chunks.
  const Bytef* p = static_cast<const Bytef*>(data);
  for (size_t done = 0; done < n;) {
    const size_t chunk = std::min<size_t>(n - done, 1u << 30);
    crc_ = crc32(crc_, p + done, static_cast<uInt>(chunk));
    done += chunk;
  }
  return WriteAll(fd_, data, n, tmp_);
}

absl::Status CheckpointWriter::Append(const void* data, size_t bytes) {
  if (bytes > data_bytes_ - appended_) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path_, ": ", appended_ + bytes,
                                                   " data bytes appended, but the header declares ",
                                                   data_bytes_));
  }
  appended_ += bytes;
  return Put(data, bytes);
}

absl::Status CheckpointWriter::Finish() {
  if (appended_ != data_bytes_) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path_, ": only ", appended_,
                                                      " of the header's ", data_bytes_,
                                                      " data bytes were appended"));
  }
  const uint32_t crc = crc_;
  absl::Status s = WriteAll(fd_, &crc, sizeof(crc), tmp_);
  if (s.ok() && ::fsync(fd_) != 0) s = ErrnoError("fsync", tmp_);
  if (::close(fd_) != 0 && s.ok()) s = ErrnoError("close", tmp_);
  fd_ = -1;
  if (!s.ok()) {
    ::unlink(tmp_.c_str());
    return s;
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    s = ErrnoError("cannot rename to", path_);
    ::unlink(tmp_.c_str());
    return s;
  }
  // Make the rename itself durable.
  int dfd = ::open(Dirname(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status WriteCheckpoint(const std::string& path, v1::CheckpointHeader header,
                             const NamedTensors& tensors) {
  std::vector<TensorDecl> decls;
  for (const auto& [name, t] : tensors) {
    if (!t.device().is_cpu()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint tensor '", name, "' is not on the CPU"));
    }
    decls.push_back(TensorDecl{name, t.dtype(), t.shape()});
  }
  ASSIGN_OR_RETURN(auto w, CheckpointWriter::Open(path, std::move(header), decls));
  for (const auto& [name, t] : tensors) RETURN_IF_ERROR(w->Append(t.raw(), t.bytes()));
  return w->Finish();
}

namespace {

// Only a regular file, and only as many bytes as it had when opened: a
// directory, a FIFO or /dev/zero gets a clear error, never an endless read.
// The descriptor and the file's size at open.
absl::StatusOr<std::pair<int, size_t>> OpenRegular(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open checkpoint ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", path, " is not a regular file",
        dir ? " but a directory (give a checkpoint file, or a directory to `yoke train --resume`)"
            : ""));
  }
  return std::make_pair(fd, static_cast<size_t>(st.st_size));
}

// Up to `n` bytes into `out`; fewer only at the end of the file (or on an
// error, which the caller's size checks then report).
size_t ReadUpTo(int fd, char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, out + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

uint32_t Crc(uint32_t crc, const char* p, size_t n) {
  for (size_t done = 0; done < n;) {
    const size_t chunk = std::min<size_t>(n - done, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(p) + done, static_cast<uInt>(chunk));
    done += chunk;
  }
  return crc;
}

// Each record's shape and place against a data section of `data_len` bytes,
// and its name against the others': a name read twice would make the
// tensor a reader restores depend on which record it takes.
absl::Status CheckRecords(const v1::CheckpointHeader& h, size_t data_len,
                          const std::function<absl::Status(const std::string&)>& bad) {
  absl::flat_hash_set<std::string> seen;
  for (const v1::TensorRecord& r : h.tensors()) {
    if (!seen.insert(r.name()).second) {
      return bad(absl::StrCat("tensor ", common::Quote(r.name(), 64), " appears twice"));
    }
    ASSIGN_OR_RETURN(DType dt, ParseDType(r.dtype()));
    for (int64_t d : r.shape()) {
      if (d < 0) {
        return bad(
            absl::StrCat("tensor ", common::Quote(r.name(), 64), " has a negative dimension"));
      }
    }
    const Shape shape(r.shape().begin(), r.shape().end());
    if (r.offset() > data_len || r.bytes() > data_len - r.offset() ||
        static_cast<uint64_t>(NumElements(shape)) * DTypeSize(dt) != r.bytes()) {
      return bad(
          absl::StrCat("tensor ", common::Quote(r.name(), 64), " does not fit the data section"));
    }
  }
  return absl::OkStatus();
}

// The magic and version of the file's first 16 bytes; its header length.
absl::StatusOr<uint32_t> HeaderLength(const char* head, const std::string& path) {
  if (std::memcmp(head, kCheckpointMagic, sizeof(kCheckpointMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a Yoke checkpoint (bad magic)"));
  }
  uint32_t version, hdr_len;
  std::memcpy(&version, head + 8, 4);
  std::memcpy(&hdr_len, head + 12, 4);
  if (version != kCheckpointVersion) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": version ", version,
                                                   " is not supported (this build reads ",
                                                   kCheckpointVersion, ")"));
  }
  return hdr_len;
}

}  // namespace

absl::StatusOr<v1::CheckpointHeader> ReadCheckpointSlices(const std::string& path,
                                                          const std::vector<TensorSlice>& slices) {
  ASSIGN_OR_RETURN(auto opened, OpenRegular(path));
  const int fd = opened.first;
  const size_t size = opened.second;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", why));
  };
  const size_t fixed = sizeof(kCheckpointMagic) + 8;
  std::string head(fixed, '\0');
  if (size < fixed + 4 || ReadUpTo(fd, head.data(), fixed) != fixed) {
    return bad(absl::StrCat("truncated: ", size, " bytes"));
  }
  ASSIGN_OR_RETURN(const uint32_t hdr_len, HeaderLength(head.data(), path));
  if (hdr_len > size - fixed - 4) return bad("header length exceeds the file");
  std::string hdr(hdr_len, '\0');
  if (ReadUpTo(fd, hdr.data(), hdr_len) != hdr_len) return bad("truncated in the header");
  uint32_t crc = Crc(Crc(crc32(0L, Z_NULL, 0), head.data(), fixed), hdr.data(), hdr_len);
  v1::CheckpointHeader h;
  if (!h.ParseFromString(hdr)) return bad("cannot parse the header (the file is corrupt)");
  const size_t data_begin = fixed + hdr_len;
  const size_t data_len = size - 4 - data_begin;
  RETURN_IF_ERROR(CheckRecords(h, data_len, bad));
  // Each slice as a byte range of the data section.
  struct Range {
    uint64_t begin, end;
    char* dst;
  };
  std::vector<Range> ranges;
  for (const TensorSlice& sl : slices) {
    const v1::TensorRecord* rec = nullptr;
    for (const v1::TensorRecord& r : h.tensors()) {
      if (r.name() == sl.name) rec = &r;
    }
    if (rec == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", path, " has no '", sl.name, "' tensor"));
    }
    const uint64_t es = DTypeSize(sl.dst.dtype());
    if (rec->dtype() != DTypeName(sl.dst.dtype()) || !sl.dst.device().is_cpu() || sl.first < 0 ||
        static_cast<uint64_t>(sl.first + sl.dst.numel()) * es > rec->bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", path, ": '", sl.name, "' holds ", rec->bytes() / std::max<uint64_t>(es, 1),
          " ", rec->dtype(), " values, but elements ", sl.first, " to ", sl.first + sl.dst.numel(),
          " (", DTypeName(sl.dst.dtype()),
          ") were asked for (was it written for a different model?)"));
    }
    const uint64_t begin = rec->offset() + static_cast<uint64_t>(sl.first) * es;
    ranges.push_back(Range{begin, begin + sl.dst.bytes(), static_cast<char*>(sl.dst.raw())});
  }
  constexpr size_t kChunk = 4u << 20;
  std::string buf(std::min(kChunk, std::max<size_t>(data_len, 1)), '\0');
  for (uint64_t pos = 0; pos < data_len;) {
    const size_t want = std::min<uint64_t>(buf.size(), data_len - pos);
    if (ReadUpTo(fd, buf.data(), want) != want) return bad("truncated in the data");
    crc = Crc(crc, buf.data(), want);
    for (const Range& r : ranges) {
      const uint64_t lo = std::max(r.begin, pos), hi = std::min<uint64_t>(r.end, pos + want);
      if (lo < hi) std::memcpy(r.dst + (lo - r.begin), buf.data() + (lo - pos), hi - lo);
    }
    pos += want;
  }
  uint32_t stored_crc = 0;
  if (ReadUpTo(fd, reinterpret_cast<char*>(&stored_crc), 4) != 4) return bad("truncated");
  if (crc != stored_crc) return bad("checksum mismatch (the file is truncated or corrupt)");
  return h;
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(auto opened, OpenRegular(path));
  const int fd = opened.first;
  std::string bytes(opened.second, '\0');
  bytes.resize(ReadUpTo(fd, bytes.data(), bytes.size()));
  ::close(fd);
  const size_t fixed = sizeof(kCheckpointMagic) + 8;
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", why));
  };
  if (bytes.size() < fixed + 4) {
    return bad(absl::StrCat("truncated: ", bytes.size(), " bytes"));
  }
  ASSIGN_OR_RETURN(const uint32_t hdr_len, HeaderLength(bytes.data(), path));
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  const uint32_t crc = Crc(crc32(0L, Z_NULL, 0), bytes.data(), bytes.size() - 4);
  if (crc != stored_crc) {
    return bad("checksum mismatch (the file is truncated or corrupt)");
  }
  if (hdr_len > bytes.size() - fixed - 4) return bad("header length exceeds the file");
  Checkpoint ck;
  if (!ck.header.ParseFromArray(bytes.data() + fixed, static_cast<int>(hdr_len))) {
    return bad("cannot parse the header");
  }
  const size_t data_begin = fixed + hdr_len;
  const size_t data_len = bytes.size() - 4 - data_begin;
  RETURN_IF_ERROR(CheckRecords(ck.header, data_len, bad));
  for (const v1::TensorRecord& r : ck.header.tensors()) {
    ASSIGN_OR_RETURN(DType dt, ParseDType(r.dtype()));
    const Shape shape(r.shape().begin(), r.shape().end());
    ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(shape, dt, Device::CPU(),
                                                absl::StrCat("checkpoint tensor ",
                                                             common::Quote(r.name(), 64))));
    std::memcpy(t.raw(), bytes.data() + data_begin + r.offset(), r.bytes());
    ck.tensors.emplace_back(r.name(), t);
  }
  return ck;
}

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return absl::StrFormat("%s/ckpt-%010d.yoke", dir, step);
}

namespace {
absl::StatusOr<std::vector<std::string>> ListCheckpoints(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open checkpoint directory ", dir));
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() == 20 && n.rfind("ckpt-", 0) == 0 && n.substr(15) == ".yoke") {
      names.push_back(n);
    }
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}
}  // namespace

absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir) {
  ASSIGN_OR_RETURN(auto names, ListCheckpoints(dir));
  if (names.empty()) return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir));
  return dir + "/" + names.back();
}

absl::StatusOr<std::string> NewestValidCheckpoint(const std::string& dir,
                                                  std::vector<std::string>* skipped) {
  ASSIGN_OR_RETURN(auto names, ListCheckpoints(dir));
  if (names.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir, " (no ckpt-*.yoke file)"));
  }
  std::string newest_error;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    const std::string path = dir + "/" + *it;
    // Verified as a stream: a trainer about to resume one pipeline stage of
    // a model larger than its memory must not load the whole file here.
    absl::StatusOr<v1::CheckpointHeader> ck = ReadCheckpointSlices(path, {});
    if (ck.ok()) return path;
    if (newest_error.empty()) newest_error = std::string(ck.status().message());
    if (skipped != nullptr) skipped->push_back(absl::StrCat(path, ": ", ck.status().message()));
  }
  return absl::NotFoundError(absl::StrCat("no valid checkpoint in ", dir, ": all ", names.size(),
                                          " are unreadable; the newest: ", newest_error));
}

absl::Status PruneCheckpoints(const std::string& dir, int keep) {
  if (keep <= 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto names, ListCheckpoints(dir));
  for (size_t i = 0; i + keep < names.size(); ++i) {
    std::string p = dir + "/" + names[i];
    if (::unlink(p.c_str()) != 0) return ErrnoError("cannot delete", p);
  }
  return absl::OkStatus();
}

}  // namespace yoke::engine
