// FileStore (file_store.h).
#include "collective/file_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace yoke::collective {
namespace {

std::string Escape(absl::string_view key) {
  std::string out;
  for (unsigned char c : key) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
        c == '_' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  // "." and ".." would name directories; an empty key would name the store.
  if (out.empty() || out == "." || out == "..") out = absl::StrCat("%", out);
  return out;
}

// Unique per process and call, so concurrent writers never share a
// temporary file.
std::string TempSuffix() {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(".tmp.", ::getpid(), ".", counter.fetch_add(1));
}

}  // namespace

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Open(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("file store: the directory path is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("file store: cannot create directory ", dir, ": ", ec.message()));
  }
  if (!std::filesystem::is_directory(dir, ec) || ::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InternalError(absl::StrCat("file store: ", dir, " is not a writable directory"));
  }
  return std::unique_ptr<FileStore>(new FileStore(dir));
}

std::string FileStore::PathOf(absl::string_view key) const {
  return absl::StrCat(dir_, "/", Escape(key));
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  const std::string path = PathOf(key);
  const std::string tmp = path + TempSuffix();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("file store: cannot create ", tmp, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = ::write(fd, value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("file store: cannot write ", tmp, ": ", why));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("file store: cannot write ", tmp, ": ", why));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("file store: cannot rename ", tmp, " to ", path, ": ", why));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key, absl::Duration timeout) {
  const std::string path = PathOf(key);
  const absl::Time deadline = absl::Now() + std::max(timeout, absl::ZeroDuration());
  absl::Duration pause = absl::Milliseconds(5);
  while (true) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string value;
      char buf[4096];
      while (true) {
        const ssize_t n = ::read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          const std::string why = std::strerror(errno);
          ::close(fd);
          return absl::InternalError(absl::StrCat("file store: cannot read ", path, ": ", why));
        }
        if (n == 0) break;
        value.append(buf, static_cast<size_t>(n));
      }
      ::close(fd);
      return value;
    }
    if (errno != ENOENT) {
      return absl::InternalError(
          absl::StrCat("file store: cannot open ", path, ": ", std::strerror(errno)));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("store: key '", key, "' not set within ",
                                                      absl::FormatDuration(timeout), " (file ",
                                                      path, ")"));
    }
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(100));
  }
}

}  // namespace yoke::collective
