#include "common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"

namespace yoke::common {

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes,
                                            const std::string& what) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open ", what, ": ", std::strerror(errno)));
  }
  const absl::Cleanup close_fd = [fd] { ::close(fd); };
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the ", what, " must be a regular file, this is ", kind));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the ", what, " is ", size, " bytes, over the limit of ", max_bytes));
  }
  std::string out(size, '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::UnavailableError(
          absl::StrCat(path, ": cannot read ", what, ": ", std::strerror(errno)));
    }
    if (r == 0) break;  // the file shrank since fstat
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

}  // namespace yoke::common
