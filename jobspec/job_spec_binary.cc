#include "jobspec/job_spec_binary.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "security/sha256.h"

namespace yoke::common {
namespace {

std::string Errno(const std::string& what, const std::string& name) {
  return absl::StrCat("cannot ", what, " ", name, ": ", std::strerror(errno));
}

// Reads all of `fd`, failing once it holds more than `max_bytes`.
absl::StatusOr<std::string> ReadBounded(int fd, const std::string& name, int64_t max_bytes) {
  std::string bytes;
  char buf[64 * 1024];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::FailedPreconditionError(Errno("read", name));
    if (n == 0) return bytes;
    bytes.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(bytes.size()) > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": a job spec is at most ", max_bytes, " bytes; this one is larger"));
    }
  }
}

}  // namespace

std::string SerializeJobSpec(const v1::JobSpec& spec) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream raw(&out);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    spec.SerializeToCodedStream(&coded);
  }
  return out;
}

std::string JobSpecDigest(const v1::JobSpec& spec) { return Sha256(SerializeJobSpec(spec)); }

absl::Status WriteJobSpecFile(const std::string& path, const v1::JobSpec& spec) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << SerializeJobSpec(spec);
  f.close();
  if (!f) return absl::FailedPreconditionError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> ReadJobSpecFile(const std::string& path, int64_t max_bytes) {
  const bool from_stdin = path == "-";
  const std::string name = from_stdin ? "the job spec on standard input" : path;
  int fd = STDIN_FILENO;
  if (!from_stdin) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer before the
    // check below refuses it.
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      const std::string msg = Errno("open", path);
      return errno == ENOENT ? absl::NotFoundError(msg) : absl::FailedPreconditionError(msg);
    }
  }
  struct Closer {
    int fd;
    ~Closer() {
      if (fd != STDIN_FILENO) ::close(fd);
    }
  } closer{fd};
  if (!from_stdin) {
    struct stat st;
    if (::fstat(fd, &st) != 0) return absl::FailedPreconditionError(Errno("stat", path));
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a regular file (a job spec file written by the worker)"));
    }
    if (st.st_size > max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": a job spec is at most ", max_bytes,
                                                     " bytes; this one has ", st.st_size));
    }
  }
  auto bytes = ReadBounded(fd, name, max_bytes);
  if (!bytes.ok()) return bytes.status();
  if (bytes->empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": empty job spec"));
  v1::JobSpec spec;
  if (!spec.ParseFromString(*bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a serialized yoke.v1.JobSpec (", bytes->size(),
                     " bytes); a YAML job file is passed without --spec-file"));
  }
  return spec;
}

}  // namespace yoke::common
