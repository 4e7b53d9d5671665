#include "client/daemon_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace yoke::client {
namespace {

using Clock = std::chrono::steady_clock;

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
  return "stopped";
}

}  // namespace

bool Gone(pid_t pid) {
  int st;
  pid_t r = ::waitpid(pid, &st, WNOHANG);
  if (r == pid) return true;
  if (r == 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

bool StopAll(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) {
  std::vector<pid_t> left;
  for (pid_t p : pids) {
    if (p > 0 && !Gone(p)) {
      ::kill(p, SIGTERM);
      left.push_back(p);
    }
  }
  auto wait_until = [&](Clock::time_point deadline) {
    while (!left.empty() && Clock::now() < deadline) {
      std::vector<pid_t> still;
      for (pid_t p : left) {
        if (!Gone(p)) still.push_back(p);
      }
      left.swap(still);
      if (!left.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  wait_until(Clock::now() + grace);
  for (pid_t p : left) {
    ::kill(-p, SIGKILL);
    ::kill(p, SIGKILL);
  }
  wait_until(Clock::now() + std::chrono::seconds(5));
  return left.empty();
}

bool StopProcess(pid_t pid, std::chrono::milliseconds grace) { return StopAll({pid}, grace); }

bool SleepOrSignal(std::chrono::milliseconds d) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  timespec ts{static_cast<time_t>(d.count() / 1000), static_cast<long>(d.count() % 1000) * 1000000};
  return ::sigtimedwait(&set, nullptr, &ts) > 0;
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

std::string ReadFrom(const std::string& path, int64_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(offset);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DiedMessage(const std::string& what, int status, const std::string& log) {
  return absl::StrCat(what, " ", DescribeExit(status), "; the end of its log (", log, "):\n",
                      LogTail(log));
}

absl::StatusOr<pid_t> SpawnDaemon(const std::vector<std::string>& argv,
                                  const std::string& log_path) {
  // Open the log here first: a bad path is then our error message, not a
  // child that dies silently.
  int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open the log ", log_path, ": ", std::strerror(errno)));
  }
  ::close(fd);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The parent blocks SIGINT/SIGTERM to take them with sigtimedwait; the
  // daemons must get them normally.
  sigset_t empty, defaults;
  sigemptyset(&empty);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, &attr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  }
  return pid;
}

bool ProcessIsNamed(pid_t pid, const std::string& name) {
  if (pid <= 0) return false;
  std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"), std::ios::binary);
  std::string argv0;
  if (!in || !std::getline(in, argv0, '\0')) return false;
  size_t slash = argv0.rfind('/');
  return (slash == std::string::npos ? argv0 : argv0.substr(slash + 1)) == name;
}

std::string LogTail(const std::string& path, int lines) {
  std::ifstream in(path);
  if (!in) return "";
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  std::string out;
  for (const auto& l : tail) absl::StrAppend(&out, "  | ", l, "\n");
  return out;
}

}  // namespace yoke::client
