// Child processes for tests: a helper binary built next to the test
// executable, started with fork + execv and reaped with its exit code.
#ifndef YOKE_COMMON_TESTING_CHILD_PROCESS_H_
#define YOKE_COMMON_TESTING_CHILD_PROCESS_H_

#include <limits.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace yoke::common {

// The path of `name` in the directory of the running executable.
inline std::string SiblingBinary(const std::string& name) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string p(self, n > 0 ? n : 0);
  return p.substr(0, p.rfind('/') + 1) + name;
}

// Starts args[0] with `args`; the child exits 127 if it cannot exec.
inline pid_t Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits for `pid`: its exit code, or 128 + the signal that killed it.
inline int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace yoke::common

#endif  // YOKE_COMMON_TESTING_CHILD_PROCESS_H_
