// The process plumbing of `yoke up` and `yoke down` (local_cluster.h):
// starting a daemon in its own session with its output in a log, telling
// whether a pid still runs a given program, stopping processes with a grace
// period, waiting for a stop signal, and reading logs.
//
// Thread-safety: every function is safe from any thread.
#ifndef YOKE_CLIENT_DAEMON_PROCESS_H_
#define YOKE_CLIENT_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace yoke::client {

// Starts `argv[0]` (a path) in a new session with stdin from /dev/null and
// stdout+stderr appended to `log_path`, with SIGINT, SIGTERM and SIGPIPE
// unblocked and at their defaults. Returns its pid, or INTERNAL naming the
// binary (or the log, when it cannot be opened).
absl::StatusOr<pid_t> SpawnDaemon(const std::vector<std::string>& argv,
                                  const std::string& log_path);

// Stops `pid`: SIGTERM, then SIGKILL once `grace` has passed, and waits for
// it to be gone (reaping it when it is our child). Returns true when the
// process is gone, false when it survived SIGKILL for 5 s more.
bool StopProcess(pid_t pid, std::chrono::milliseconds grace);

// StopProcess for all of `pids` at once; a process still there after the
// grace is SIGKILLed with its process group (which catches a trainer its
// worker could not stop). Pids <= 0 and processes gone already are skipped.
// Returns false if any survived SIGKILL for 5 s.
bool StopAll(const std::vector<pid_t>& pids, std::chrono::milliseconds grace);

// True once `pid` no longer runs. Reaps it when it is our child; for a
// process we did not start (`yoke down`) a zombie counts as gone, since its
// parent (init, after `yoke up --detach` exited) reaps it soon.
bool Gone(pid_t pid);

// True when `pid` runs a program whose file name is `name` (from
// /proc/PID/cmdline), so that `yoke down` never signals a recycled pid.
bool ProcessIsNamed(pid_t pid, const std::string& name);

// Sleeps up to `d`, returning early (true) when SIGINT or SIGTERM arrives.
// The caller blocks both (in every thread), so they queue until taken here.
bool SleepOrSignal(std::chrono::milliseconds d);

// The last `lines` lines of the file at `path`, each as "  | LINE\n" (""
// if it cannot be read).
std::string LogTail(const std::string& path, int lines = 20);

// The size of the file at `path` (0 if it cannot be read), and its text
// from byte `offset` on ("" if it cannot be read).
int64_t FileSize(const std::string& path);
std::string ReadFrom(const std::string& path, int64_t offset);

// A child that exited with wait status `status`: "<what> exited with status
// 2; the end of its log (LOG):\n" and the log's tail.
std::string DiedMessage(const std::string& what, int status, const std::string& log);

}  // namespace yoke::client

#endif  // YOKE_CLIENT_DAEMON_PROCESS_H_
