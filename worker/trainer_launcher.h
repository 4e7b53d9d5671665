// TrainerLauncher: one child trainer (`yoke-trainer SPEC --output events`),
// supervised by the worker daemon.
//
// The child runs in its own process group with stdin on /dev/null and
// stdout/stderr on pipes. A monitor thread reads both: stdout lines are
// v1::TrainerEvent JSON objects (trainer/progress.h, EventProgress), from which
// it keeps the latest step progress, the finished epochs, the result and the
// trainer's error message; any other stdout line, and every stderr line,
// becomes a log line with an increasing sequence number (the last
// `max_log_lines` are kept, and all of them are appended to `log_path`). The
// same thread reaps the child.
//
// Stopping: Stop(grace) sends SIGTERM to the whole process group (the trainer
// then finishes its step, checkpoints and exits) and SIGKILL to the group once
// `grace` has passed. When the trainer exits, whatever is left of its group
// is killed too, so nothing it started outlives it. By default the child also
// gets SIGKILL if the thread that started it dies (PR_SET_PDEATHSIG), so a
// crashed daemon leaves no orphan trainers holding devices.
//
// Memory: with `memory_cgroups` and `memory_limit_bytes` set, the child joins
// a memory cgroup of its own with that limit before it execs (it writes its
// pid to the cgroup's cgroup.procs; failing that, it never runs and Start
// fails), so the kernel's OOM killer ends it alone when it passes the limit.
// Once the child is reaped, the cgroup's figures are read into
// TrainerState::memory and the cgroup is removed (anything still in it is
// killed first).
//
// Exit code: the child's exit status, or 128 + n when signal n ended it.
// Reason: "" for exit 0; otherwise the trainer's {"error": ...} message, or a
// description of the stop or signal, or the last stderr line. A child the
// cgroup's OOM killer ended gets "out of memory: ..." naming its limit in
// bytes and GiB/MiB, as does one that aborted on std::bad_alloc.
//
// Thread-safety: all public methods may be called from any thread.
#ifndef YOKE_WORKER_TRAINER_LAUNCHER_H_
#define YOKE_WORKER_TRAINER_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/yoke/v1/metrics.pb.h"
#include "worker/memory_cgroup.h"

namespace yoke::worker {

struct TrainerLauncherOptions {
  // The program to run: yoke-trainer, or anything else in tests.
  std::string binary;
  // argv[1..].
  std::vector<std::string> args;
  // The child's working directory ("" keeps the parent's).
  std::string work_dir;
  // "NAME=value" entries added to (or replacing in) the inherited environment.
  std::vector<std::string> env;
  // Log lines kept; older ones are dropped (their sequence numbers stay used).
  size_t max_log_lines = 10000;
  // A line longer than this is cut into pieces of this size.
  size_t max_line_bytes = 64 * 1024;
  // Also append every log line to this file ("" = none), so an attempt's
  // output survives the daemon's in-memory buffer.
  std::string log_path;
  // SIGKILL the child when the thread that called Start() exits.
  bool kill_with_parent = true;
  // Called with every progress event, on the thread that reads the child's
  // output (the worker's metrics; worker/worker_metrics.h).
  std::function<void(const v1::StepProgress&)> on_step;
  // Run the child under this memory limit, in a cgroup made by
  // `memory_cgroups` (which must outlive the launcher). Either unset: none.
  MemoryCgroups* memory_cgroups = nullptr;
  int64_t memory_limit_bytes = 0;
};

struct TrainerLogLine {
  int64_t seq = 0;      // 1, 2, ... per process
  int64_t time_ms = 0;  // Unix time the line was read
  std::string text;     // without the newline
};

// A snapshot of what the child has reported so far.
struct TrainerState {
  pid_t pid = 0;
  // The child printed at least one event (it loaded its spec and started).
  bool reported = false;
  bool stop_requested = false;
  bool has_progress = false;
  v1::StepProgress progress;  // the latest step event
  // The epoch events not yet forgotten (ForgetEpochs), in order: epochs[i]
  // is the (epochs_forgotten + i)-th of the child's.
  std::vector<v1::EpochResult> epochs;
  size_t epochs_forgotten = 0;
  bool has_result = false;
  v1::TrainResult result;
  std::string error;         // the {"error": ...} message, if any
  int64_t last_log_seq = 0;  // highest sequence number so far
  // Set once the child has exited and its output has been read to the end.
  bool exited = false;
  int exit_code = 0;
  std::string reason;
  // The limit of the child's memory cgroup (0: it had none) and, once it
  // exited, what the kernel said of that cgroup just before it was removed.
  int64_t memory_limit_bytes = 0;
  std::string memory_cgroup;  // its directory
  CgroupMemoryStats memory;
  bool cgroup_removed = false;
  // The cgroup's OOM killer ended it, or it aborted on std::bad_alloc.
  bool out_of_memory = false;
};

class TrainerLauncher {
 public:
  // Starts the child. Fails with FAILED_PRECONDITION if the binary cannot be
  // executed or the working directory cannot be entered (the child never
  // runs), INTERNAL if pipes or fork fail.
  static absl::StatusOr<std::unique_ptr<TrainerLauncher>> Start(
      const TrainerLauncherOptions& options);

  // Kills the process group (SIGKILL) if the child still runs, then waits
  // for the monitor thread.
  ~TrainerLauncher();
  TrainerLauncher(const TrainerLauncher&) = delete;
  TrainerLauncher& operator=(const TrainerLauncher&) = delete;

  pid_t pid() const { return pid_; }

  TrainerState State() const;

  // Drops the first `count` epoch events (those the coordinator has
  // acknowledged), so a job of many short epochs does not grow the worker's
  // memory, nor the snapshot State() copies, with every epoch it runs.
  void ForgetEpochs(size_t count);

  // Log lines with seq > `after_seq`, oldest first, at most `max_lines`.
  std::vector<TrainerLogLine> LogsSince(int64_t after_seq, size_t max_lines) const;

  // SIGTERM to the process group now, SIGKILL when `grace` has passed. Does
  // not wait. A second call may only bring the SIGKILL deadline forward.
  // No effect once the child has exited.
  void Stop(absl::Duration grace);

  // Waits until State().exited or `timeout` passes; returns State().exited.
  bool WaitForExit(absl::Duration timeout) const;

 private:
  TrainerLauncher() = default;
  // The launcher of a child that exec'd as `pid`: takes the read ends of its
  // stdout and stderr pipes, the wake-up pipe and the log file, and starts
  // the monitor thread.
  static std::unique_ptr<TrainerLauncher> Adopt(const TrainerLauncherOptions& options, pid_t pid,
                                                int out_fd, int err_fd, const int wake[2],
                                                FILE* log_file,
                                                std::unique_ptr<TrainerCgroup> cgroup);
  void Monitor();
  // Splits newly read bytes of stream `which` (0 stdout, 1 stderr) into lines.
  void Consume(int which, const char* data, size_t n);
  void HandleLine(int which, std::string line);
  void AddLog(std::string text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ExitReason(int status) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reason for a child that ran out of memory; "" if it did not.
  std::string OutOfMemoryReason(int status) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the cgroup's figures into state_ and removes it (monitor thread).
  void ReleaseCgroup();

  TrainerLauncherOptions options_;
  pid_t pid_ = 0;
  int out_fd_ = -1, err_fd_ = -1;
  int wake_read_ = -1, wake_write_ = -1;
  std::string partial_[2];  // monitor thread only
  std::thread monitor_;
  std::unique_ptr<TrainerCgroup> cgroup_;  // monitor thread only, once started

  mutable absl::Mutex mu_;
  TrainerState state_ ABSL_GUARDED_BY(mu_);
  std::deque<TrainerLogLine> logs_ ABSL_GUARDED_BY(mu_);
  FILE* log_file_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string last_stderr_ ABSL_GUARDED_BY(mu_);
  // The child is a zombie or gone: never signal its group id again.
  bool reaped_ ABSL_GUARDED_BY(mu_) = false;
  bool killed_after_grace_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration grace_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Time kill_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace yoke::worker

#endif  // YOKE_WORKER_TRAINER_LAUNCHER_H_
