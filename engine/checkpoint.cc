#include "engine/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

absl::Status WriteCheckpoint(const std::string& path, v1::CheckpointHeader header,
                             const NamedTensors& tensors) {
  header.clear_tensors();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (!t.device().is_cpu()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint tensor '", name, "' is not on the CPU"));
    }
    v1::TensorRecord* r = header.add_tensors();
    r->set_name(name);
    r->set_dtype(DTypeName(t.dtype()));
    for (int64_t d : t.shape()) r->add_shape(d);
    r->set_offset(offset);
    r->set_bytes(t.bytes());
    offset += t.bytes();
  }
  std::string hdr;
  if (!header.SerializeToString(&hdr)) {
    return absl::InternalError("cannot serialize the checkpoint header");
  }
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  uint32_t crc = crc32(0L, Z_NULL, 0);
  auto put = [&](const void* data, size_t n) -> absl::Status {
    // zlib's crc32 takes a uInt length; feed it in chunks.
    const Bytef* p = static_cast<const Bytef*>(data);
    for (size_t done = 0; done < n;) {
      size_t chunk = std::min<size_t>(n - done, 1u << 30);
      crc = crc32(crc, p + done, static_cast<uInt>(chunk));
      done += chunk;
    }
    return WriteAll(fd, data, n, tmp);
  };
  uint32_t version = kCheckpointVersion;
  uint32_t hdr_len = static_cast<uint32_t>(hdr.size());
  absl::Status s = put(kCheckpointMagic, sizeof(kCheckpointMagic));
  if (s.ok()) s = put(&version, sizeof(version));
  if (s.ok()) s = put(&hdr_len, sizeof(hdr_len));
  if (s.ok()) s = put(hdr.data(), hdr.size());
  for (const auto& [name, t] : tensors) {
    if (s.ok()) s = put(t.raw(), t.bytes());
  }
  if (s.ok()) s = WriteAll(fd, &crc, sizeof(crc), tmp);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError("fsync", tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoError("close", tmp);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    s = ErrnoError("cannot rename to", path);
    ::unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable.
  int dfd = ::open(Dirname(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  // Only a regular file, and only as many bytes as it had when opened: a
  // directory, a FIFO or /dev/zero gets a clear error, never an endless read.
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
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // an error, or the file shrank: the checks below say so
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  bytes.resize(got);
  const size_t fixed = sizeof(kCheckpointMagic) + 8;
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path, ": ", why));
  };
  if (bytes.size() < fixed + 4) {
    return bad(absl::StrCat("truncated: ", bytes.size(), " bytes"));
  }
  if (std::memcmp(bytes.data(), kCheckpointMagic, sizeof(kCheckpointMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a Yoke checkpoint (bad magic)"));
  }
  uint32_t version, hdr_len, stored_crc;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&hdr_len, bytes.data() + 12, 4);
  if (version != kCheckpointVersion) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", path, ": version ", version,
                                                   " is not supported (this build reads ",
                                                   kCheckpointVersion, ")"));
  }
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  uint32_t crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < bytes.size() - 4;) {
    size_t chunk = std::min<size_t>(bytes.size() - 4 - done, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()) + done, static_cast<uInt>(chunk));
    done += chunk;
  }
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
  for (const v1::TensorRecord& r : ck.header.tensors()) {
    ASSIGN_OR_RETURN(DType dt, ParseDType(r.dtype()));
    Shape shape(r.shape().begin(), r.shape().end());
    for (int64_t d : shape) {
      if (d < 0)
        return bad(
            absl::StrCat("tensor ", common::Quote(r.name(), 64), " has a negative dimension"));
    }
    if (r.offset() > data_len || r.bytes() > data_len - r.offset() ||
        static_cast<uint64_t>(NumElements(shape)) * DTypeSize(dt) != r.bytes()) {
      return bad(
          absl::StrCat("tensor ", common::Quote(r.name(), 64), " does not fit the data section"));
    }
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
    absl::StatusOr<Checkpoint> ck = ReadCheckpoint(path);
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
