#include "worker/trainer_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "jobspec/memory_estimate.h"

extern char** environ;

namespace yoke::worker {
namespace {

// After the child exits, how long to keep reading output that something it
// left behind (and that escaped its process group) still holds open.
constexpr absl::Duration kDrainAfterExit = absl::Seconds(2);
// How often the monitor checks for the child's exit and the kill deadline
// when no output arrives.
constexpr int kPollMillis = 50;

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// The environment for the child: ours, with `extra` ("NAME=value") added or
// replacing entries of the same name.
std::vector<std::string> ChildEnvironment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  auto name_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    bool replaced = false;
    for (const std::string& x : extra) replaced |= name_of(x) == name_of(kv);
    if (!replaced) env.push_back(std::move(kv));
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// Opens `path` for appending, line-buffered; null for "". FAILED_PRECONDITION
// naming the file if it cannot be opened.
absl::StatusOr<FILE*> OpenLogFile(const std::string& path) {
  if (path.empty()) return nullptr;
  FILE* f = std::fopen(path.c_str(), "ae");
  if (!f) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open log file ", path, ": ", std::strerror(errno)));
  }
  setvbuf(f, nullptr, _IOLBF, 0);  // readable with tail -f as lines arrive
  return f;
}

// Everything the child needs to exec, prepared before fork: after it, only
// async-signal-safe calls are allowed (the daemon has other threads). The
// char* arrays point into the strings, so this is neither copied nor moved.
struct ChildExec {
  explicit ChildExec(const TrainerLauncherOptions& options)
      : argv_s(ArgvOf(options)),
        env_s(ChildEnvironment(options.env)),
        argv(CStrings(argv_s)),
        envp(CStrings(env_s)),
        work_dir(options.work_dir.empty() ? nullptr : options.work_dir.c_str()),
        kill_with_parent(options.kill_with_parent) {}
  ChildExec(const ChildExec&) = delete;
  ChildExec& operator=(const ChildExec&) = delete;

  static std::vector<std::string> ArgvOf(const TrainerLauncherOptions& options) {
    std::vector<std::string> v = {options.binary};
    v.insert(v.end(), options.args.begin(), options.args.end());
    return v;
  }

  std::vector<std::string> argv_s, env_s;
  std::vector<char*> argv, envp;
  const char* work_dir;  // null: stay in the parent's
  bool kill_with_parent;
  int cgroup_procs_fd = -1;  // the memory cgroup's cgroup.procs to join; -1: none
};

// What the child reports through exec_err when it fails before exec.
struct ChildFailure {
  enum Stage : int { kExec = 0, kCgroup = 1 };
  int stage = kExec;
  int error = 0;  // errno
};

// The pipes of one launch: the child's stdout and stderr, exec_err (the
// child's errno if it fails before exec; closed on exec), and the monitor's
// wake-up pipe (non-blocking). All close-on-exec.
struct ChildPipes {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, exec_err[2] = {-1, -1}, wake[2] = {-1, -1};

  // Creates all four; on failure returns INTERNAL and leaves none open.
  absl::Status Open() {
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
        ::pipe2(exec_err, O_CLOEXEC) != 0 || ::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
      std::string msg = Errno("pipe2");
      CloseAll();
      return absl::InternalError(msg);
    }
    return absl::OkStatus();
  }
  void CloseAll() {
    for (int* p : {out, err, exec_err, wake}) CloseFd(&p[0]), CloseFd(&p[1]);
  }
};

// In the forked child, up to exec: its own process group, optionally
// SIGKILL when the parent's thread dies, default signal handling, stdin
// from `dev_null`, stdout and stderr into the pipes, the working directory.
// Never returns: a failure writes errno to exec_err and exits 127.
[[noreturn]] void ExecChild(const ChildExec& exec, const ChildPipes& pipes, int dev_null,
                            pid_t parent) {
  // Report a failure before exec through exec_err.
  auto fail = [&](int e, int stage = ChildFailure::kExec) {
    const ChildFailure f{stage, e};
    (void)!::write(pipes.exec_err[1], &f, sizeof(f));
    ::_exit(127);
  };
  if (exec.cgroup_procs_fd >= 0) {
    // Join the memory cgroup first, so all the trainer allocates is charged
    // there. The pid in decimal, formatted without the (unsafe) library.
    char digits[24];
    int n = 0;
    for (pid_t p = ::getpid(); p > 0 && n < 24; p /= 10)
      digits[n++] = static_cast<char>('0' + p % 10);
    char text[24];
    for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
    if (::write(exec.cgroup_procs_fd, text, n) != n) fail(errno, ChildFailure::kCgroup);
  }
  ::setpgid(0, 0);
  if (exec.kill_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
  }
  // Signal masks and ignored signals survive exec; the daemon blocks
  // SIGTERM in its threads, which would make the trainer unstoppable.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int s : {SIGTERM, SIGINT, SIGPIPE, SIGHUP, SIGCHLD}) ::sigaction(s, &dfl, nullptr);
  if (dev_null >= 0) ::dup2(dev_null, 0);
  if (::dup2(pipes.out[1], 1) < 0 || ::dup2(pipes.err[1], 2) < 0) fail(errno);
  if (exec.work_dir && ::chdir(exec.work_dir) != 0) fail(errno);
  ::execve(exec.argv[0], exec.argv.data(), exec.envp.data());
  fail(errno);
  ::_exit(127);  // not reached: fail() exits
}

// In the parent after fork: closes exec_err's write end and waits until the
// child execs (the pipe closes: nullopt) or reports a failure before exec.
std::optional<ChildFailure> AwaitExec(ChildPipes& pipes) {
  CloseFd(&pipes.exec_err[1]);
  ChildFailure f;
  ssize_t n;
  do {
    n = ::read(pipes.exec_err[0], &f, sizeof(f));
  } while (n < 0 && errno == EINTR);
  CloseFd(&pipes.exec_err[0]);
  if (n > 0) return f;
  return std::nullopt;
}

// The FAILED_PRECONDITION for a child that failed before exec: the memory
// cgroup it could not join, the working directory if it cannot be entered,
// else the binary.
absl::Status ExecError(const TrainerLauncherOptions& options, const ChildFailure& failure,
                       const TrainerCgroup* cgroup) {
  const int child_errno = failure.error;
  if (failure.stage == ChildFailure::kCgroup) {
    return absl::FailedPreconditionError(absl::StrCat("cannot join the memory cgroup ",
                                                      cgroup ? cgroup->dir() : "", ": ",
                                                      std::strerror(child_errno)));
  }
  const bool in_dir = !options.work_dir.empty() && child_errno == ENOENT &&
                      ::access(options.work_dir.c_str(), X_OK) != 0;
  return absl::FailedPreconditionError(
      in_dir ? absl::StrCat("cannot enter working directory ", options.work_dir, ": ",
                            std::strerror(child_errno))
             : absl::StrCat("cannot run ", options.binary, ": ", std::strerror(child_errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainerLauncher>> TrainerLauncher::Start(
    const TrainerLauncherOptions& options) {
  if (options.binary.empty()) {
    return absl::InvalidArgumentError("trainer binary: must be set");
  }
  absl::StatusOr<FILE*> opened = OpenLogFile(options.log_path);
  if (!opened.ok()) return opened.status();
  FILE* const log_file = *opened;
  auto close_log = [&] {
    if (log_file) std::fclose(log_file);
  };
  std::unique_ptr<TrainerCgroup> cgroup;
  if (options.memory_cgroups != nullptr && options.memory_limit_bytes > 0) {
    auto made = options.memory_cgroups->Create(options.memory_limit_bytes);
    if (!made.ok()) {
      close_log();
      return made.status();
    }
    cgroup = *std::move(made);
  }
  ChildExec exec(options);
  if (cgroup) exec.cgroup_procs_fd = cgroup->procs_fd();
  ChildPipes pipes;
  if (absl::Status s = pipes.Open(); !s.ok()) {
    close_log();
    return s;
  }
  int dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) {
    std::string msg = Errno("fork");
    pipes.CloseAll();
    close_log();
    CloseFd(&dev_null);
    return absl::InternalError(msg);
  }
  if (pid == 0) ExecChild(exec, pipes, dev_null, parent);

  // Parent. Set the group here too, so a Stop() right after Start() cannot
  // race the child's own setpgid.
  ::setpgid(pid, pid);
  CloseFd(&dev_null);
  CloseFd(&pipes.out[1]);
  CloseFd(&pipes.err[1]);
  if (const std::optional<ChildFailure> failure = AwaitExec(pipes)) {
    int status;
    ::waitpid(pid, &status, 0);
    pipes.CloseAll();
    close_log();
    return ExecError(options, *failure, cgroup.get());
  }
  return Adopt(options, pid, pipes.out[0], pipes.err[0], pipes.wake, log_file, std::move(cgroup));
}

std::unique_ptr<TrainerLauncher> TrainerLauncher::Adopt(const TrainerLauncherOptions& options,
                                                        pid_t pid, int out_fd, int err_fd,
                                                        const int wake[2], FILE* log_file,
                                                        std::unique_ptr<TrainerCgroup> cgroup) {
  std::unique_ptr<TrainerLauncher> p(new TrainerLauncher());
  p->cgroup_ = std::move(cgroup);
  p->options_ = options;
  p->pid_ = pid;
  p->out_fd_ = out_fd;
  p->err_fd_ = err_fd;
  p->wake_read_ = wake[0];
  p->wake_write_ = wake[1];
  for (int fd : {p->out_fd_, p->err_fd_}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  {
    absl::MutexLock l(&p->mu_);
    p->state_.pid = pid;
    p->state_.memory_limit_bytes = p->cgroup_ ? p->cgroup_->limit_bytes() : 0;
    p->state_.memory_cgroup = p->cgroup_ ? p->cgroup_->dir() : "";
    p->log_file_ = log_file;
  }
  p->monitor_ = std::thread([raw = p.get()] { raw->Monitor(); });
  return p;
}

TrainerLauncher::~TrainerLauncher() {
  {
    absl::MutexLock l(&mu_);
    shutting_down_ = true;
    if (!reaped_) ::kill(-pid_, SIGKILL);
  }
  char c = 1;
  (void)!::write(wake_write_, &c, 1);
  if (monitor_.joinable()) monitor_.join();
  for (int* fd : {&out_fd_, &err_fd_, &wake_read_, &wake_write_}) CloseFd(fd);
  absl::MutexLock l(&mu_);
  if (log_file_) std::fclose(log_file_);
  log_file_ = nullptr;
}

TrainerState TrainerLauncher::State() const {
  absl::MutexLock l(&mu_);
  return state_;
}

void TrainerLauncher::ForgetEpochs(size_t count) {
  absl::MutexLock l(&mu_);
  if (count <= state_.epochs_forgotten) return;
  const size_t drop = std::min(count - state_.epochs_forgotten, state_.epochs.size());
  state_.epochs.erase(state_.epochs.begin(), state_.epochs.begin() + static_cast<ptrdiff_t>(drop));
  state_.epochs_forgotten += drop;
}

std::vector<TrainerLogLine> TrainerLauncher::LogsSince(int64_t after_seq, size_t max_lines) const {
  absl::MutexLock l(&mu_);
  std::vector<TrainerLogLine> out;
  if (logs_.empty()) return out;
  // Sequence numbers are contiguous, so the first wanted line is found by
  // arithmetic rather than a scan.
  int64_t first = logs_.front().seq;
  size_t i = after_seq < first ? 0 : static_cast<size_t>(after_seq - first + 1);
  for (; i < logs_.size() && out.size() < max_lines; ++i) out.push_back(logs_[i]);
  return out;
}

void TrainerLauncher::Stop(absl::Duration grace) {
  {
    absl::MutexLock l(&mu_);
    if (reaped_ || state_.exited) return;
    if (!state_.stop_requested) {
      state_.stop_requested = true;
      grace_ = grace;
      ::kill(-pid_, SIGTERM);
    }
    absl::Time deadline = absl::Now() + grace;
    if (deadline < kill_deadline_) kill_deadline_ = deadline;
  }
  char c = 1;
  (void)!::write(wake_write_, &c, 1);
}

bool TrainerLauncher::WaitForExit(absl::Duration timeout) const {
  absl::MutexLock l(&mu_);
  auto exited = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_.exited; };
  return mu_.AwaitWithTimeout(absl::Condition(&exited), timeout);
}

void TrainerLauncher::AddLog(std::string text) {
  TrainerLogLine line;
  line.seq = ++state_.last_log_seq;
  line.time_ms = absl::ToUnixMillis(absl::Now());
  line.text = std::move(text);
  if (log_file_) {
    std::fwrite(line.text.data(), 1, line.text.size(), log_file_);
    std::fputc('\n', log_file_);
  }
  logs_.push_back(std::move(line));
  while (logs_.size() > options_.max_log_lines) logs_.pop_front();
}

void TrainerLauncher::HandleLine(int which, std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (which == 0 && !line.empty() && line[0] == '{') {
    v1::TrainerEvent ev;
    google::protobuf::util::JsonParseOptions jo;
    jo.ignore_unknown_fields = true;  // a newer trainer may add fields
    if (google::protobuf::util::JsonStringToMessage(line, &ev, jo).ok() &&
        ev.event_case() != v1::TrainerEvent::EVENT_NOT_SET) {
      if (ev.event_case() == v1::TrainerEvent::kStep && options_.on_step)
        options_.on_step(ev.step());
      absl::MutexLock l(&mu_);
      state_.reported = true;
      switch (ev.event_case()) {
        case v1::TrainerEvent::kStep:
          state_.has_progress = true;
          state_.progress = ev.step();
          break;
        case v1::TrainerEvent::kEpoch:
          state_.epochs.push_back(ev.epoch());
          break;
        case v1::TrainerEvent::kResult:
          state_.has_result = true;
          state_.result = ev.result();
          break;
        case v1::TrainerEvent::kError:
          state_.error = ev.error();
          break;
        default:  // info: the trainer writes the same text to stderr
          break;
      }
      return;
    }
  }
  absl::MutexLock l(&mu_);
  if (which == 1 && !line.empty()) last_stderr_ = line;
  AddLog(std::move(line));
}

void TrainerLauncher::Consume(int which, const char* data, size_t n) {
  std::string& buf = partial_[which];
  buf.append(data, n);
  size_t start = 0;
  while (true) {
    size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    HandleLine(which, buf.substr(start, nl - start));
    start = nl + 1;
  }
  buf.erase(0, start);
  while (buf.size() >= options_.max_line_bytes) {
    HandleLine(which, buf.substr(0, options_.max_line_bytes));
    buf.erase(0, options_.max_line_bytes);
  }
}

std::string TrainerLauncher::OutOfMemoryReason(int status) const {
  const bool signaled = WIFSIGNALED(status);
  std::string share;
  if (state_.memory_limit_bytes > 0) {
    share = absl::StrCat(state_.memory_limit_bytes, " bytes (",
                         common::FormatBytes(static_cast<double>(state_.memory_limit_bytes)), ")");
  }
  if (!share.empty() && KilledForMemory(state_.memory, signaled && WTERMSIG(status) == SIGKILL)) {
    return absl::StrCat("out of memory: the trainer passed its memory share of ", share,
                        " and the kernel's OOM killer ended it",
                        signaled ? absl::StrCat(" (signal ", WTERMSIG(status), ")") : "");
  }
  // An allocation the kernel refused outright (std::bad_alloc) aborts.
  if (signaled && WTERMSIG(status) == SIGABRT &&
      last_stderr_.find("std::bad_alloc") != std::string::npos) {
    return absl::StrCat(
        "out of memory: an allocation failed (std::bad_alloc) and the trainer "
        "aborted",
        share.empty() ? "" : absl::StrCat("; its memory share is ", share));
  }
  return "";
}

std::string TrainerLauncher::ExitReason(int status) const {
  const bool signaled = WIFSIGNALED(status);
  const int code = signaled ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  if (code == 0) return "";
  if (!state_.error.empty()) return state_.error;
  if (std::string oom = OutOfMemoryReason(status); !oom.empty()) return oom;
  if (killed_after_grace_) {
    return absl::StrCat("did not exit within ", absl::FormatDuration(grace_),
                        " of SIGTERM; killed with SIGKILL");
  }
  if (state_.stop_requested) {
    return signaled ? absl::StrCat("stopped on request (signal ", WTERMSIG(status), ")")
                    : absl::StrCat("stopped on request (exit code ", code, ")");
  }
  if (signaled) {
    std::string r =
        absl::StrFormat("killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (!last_stderr_.empty()) absl::StrAppend(&r, "; last output: ", last_stderr_);
    return r;
  }
  if (!last_stderr_.empty()) return last_stderr_;
  return absl::StrCat("exited with code ", code);
}

void TrainerLauncher::ReleaseCgroup() {
  if (!cgroup_) return;
  const CgroupMemoryStats stats = cgroup_->Stats();
  const bool removed = cgroup_->Remove();
  absl::MutexLock l(&mu_);
  state_.memory = stats;
  state_.cgroup_removed = removed;
}

void TrainerLauncher::Monitor() {
  struct pollfd fds[3] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
  bool reaped = false;
  int status = 0;
  bool status_known = true;
  absl::Time drain_deadline = absl::InfiniteFuture();
  std::vector<char> buf(64 * 1024);
  while (true) {
    int rc = ::poll(fds, 3, kPollMillis);
    if (rc < 0 && errno != EINTR) ::usleep(kPollMillis * 1000);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || rc <= 0 || fds[i].revents == 0) continue;
      while (true) {
        ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
        if (n > 0) {
          Consume(i, buf.data(), static_cast<size_t>(n));
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) break;
        fds[i].fd = -1;  // EOF or a read error: this stream is done
        break;
      }
    }
    if (rc > 0 && (fds[2].revents & POLLIN)) {
      char drain[64];
      while (::read(wake_read_, drain, sizeof(drain)) > 0) {
      }
    }
    if (!reaped) {
      // Look without reaping first: while the zombie exists its pid (our
      // process group id) cannot be reused, so killing the group is safe.
      siginfo_t info;
      std::memset(&info, 0, sizeof(info));
      int w = ::waitid(P_PID, pid_, &info, WEXITED | WNOHANG | WNOWAIT);
      if ((w == 0 && info.si_pid == pid_) || (w < 0 && errno == ECHILD)) {
        {
          absl::MutexLock l(&mu_);
          reaped_ = true;
        }
        if (w == 0) {
          ::kill(-pid_, SIGKILL);  // whatever the trainer left in its group
          ::waitpid(pid_, &status, 0);
        } else {
          status_known = false;  // someone else reaped it
        }
        ReleaseCgroup();
        reaped = true;
        drain_deadline = absl::Now() + kDrainAfterExit;
      } else {
        absl::MutexLock l(&mu_);
        if (absl::Now() >= kill_deadline_) {
          ::kill(-pid_, SIGKILL);
          if (state_.stop_requested && !shutting_down_) killed_after_grace_ = true;
          kill_deadline_ = absl::InfiniteFuture();
        }
      }
    }
    if (reaped) {
      bool done = fds[0].fd < 0 && fds[1].fd < 0;
      absl::MutexLock l(&mu_);
      if (done || shutting_down_ || absl::Now() >= drain_deadline) break;
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (!partial_[i].empty()) HandleLine(i, std::move(partial_[i]));
    partial_[i].clear();
  }
  absl::MutexLock l(&mu_);
  if (status_known) {
    state_.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    state_.reason = ExitReason(status);
    state_.out_of_memory = !OutOfMemoryReason(status).empty();
  } else {
    state_.exit_code = -1;
    state_.reason = "exit status unknown: the process was reaped elsewhere";
  }
  state_.exited = true;
  if (log_file_) std::fflush(log_file_);
}

}  // namespace yoke::worker
