#include "coordinator/private_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace yoke::server {

absl::Status MakePrivate(const std::string& path) {
  if (path.empty() || path == ":memory:") return absl::OkStatus();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("'", path, "': cannot create or open: ", std::strerror(errno)));
  }
  const int rc = ::fchmod(fd, 0600);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("'", path, "': cannot set mode 0600: ", std::strerror(err)));
  }
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    const std::string companion = path + suffix;
    if (::chmod(companion.c_str(), 0600) != 0 && errno != ENOENT) {
      return absl::UnavailableError(
          absl::StrCat("'", companion, "': cannot set mode 0600: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace yoke::server
