// Helpers for the end-to-end tests of the control plane: run the real `yoke`
// binary, and a local cluster (`yoke up --detach`) per test that is always
// torn down, even when the test fails.
//
// Each TestCluster lives in its own temp dir with its own state dir
// (YOKE_STATE_DIR), so tests may run in parallel without seeing each other's
// clusters. Its destructor runs `yoke down`, then SIGKILLs whatever is left
// (the daemons, their process groups and their children), so a failing test
// leaks no process.
#ifndef YOKE_TESTS_E2E_UTIL_H_
#define YOKE_TESTS_E2E_UTIL_H_

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/cluster_state.h"
#include "client/local_cluster.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/coordinator.pb.h"
#include "security/certs.h"
#include "security/tls_credentials.h"

namespace yoke::e2e {

inline std::string BinDir() {
  if (const char* d = std::getenv("YOKE_BIN_DIR")) return d;
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  buf[n > 0 ? n : 0] = '\0';
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

inline std::string SourceDir() {
  const char* d = std::getenv("YOKE_SOURCE_DIR");
  return d ? d : ".";
}

inline std::string Config(const std::string& name) { return SourceDir() + "/configs/" + name; }

inline std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  return mkdtemp(buf.data());
}

struct RunResult {
  int exit_code = -1;
  std::string out;
};

// Runs a shell command line; stdout (and stderr when merge_stderr) is
// captured, stderr otherwise goes to the test's stderr for the log.
inline RunResult Sh(const std::string& cmd, bool merge_stderr = false) {
  RunResult r;
  FILE* p = popen((cmd + (merge_stderr ? " 2>&1" : "")).c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// True while `pid` runs (a zombie counts as gone).
inline bool Alive(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  size_t paren = line.rfind(')');
  if (!(paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z')) {
    return true;
  }
  // A zombie main thread whose other threads still exit: the process still
  // holds its files and locks (a restarted coordinator found its job store
  // locked), so it is not gone yet.
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string l; std::getline(status, l);) {
    if (l.rfind("Threads:", 0) == 0) return std::atoi(l.c_str() + 8) > 1;
  }
  return false;
}

// VmRSS of `pid` in bytes (or another kB field of /proc/PID/status, such as
// "VmHWM:", the peak); -1 when it cannot be read.
inline int64_t RssBytes(pid_t pid, const std::string& field = "VmRSS:") {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) {
      return std::strtoll(line.c_str() + field.size(), nullptr, 10) << 10;
    }
  }
  return -1;
}

inline std::string ProgramName(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string argv0;
  std::getline(in, argv0, '\0');
  size_t slash = argv0.rfind('/');
  return slash == std::string::npos ? argv0 : argv0.substr(slash + 1);
}

// The command line of `pid`, its arguments joined by spaces ("" if gone).
inline std::string CommandLine(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!all.empty() && all.back() == '\0') all.pop_back();
  for (char& c : all) {
    if (c == '\0') c = ' ';
  }
  return all;
}

// Pids whose parent is `parent`, optionally only those running `name`.
inline std::vector<pid_t> ChildrenOf(pid_t parent, const std::string& name = "") {
  std::vector<pid_t> kids;
  DIR* d = opendir("/proc");
  if (d == nullptr) return kids;
  while (dirent* e = readdir(d)) {
    pid_t pid = atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    char state;
    int ppid = 0;
    if (sscanf(line.c_str() + paren + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == parent && state != 'Z' && (name.empty() || ProgramName(pid) == name)) {
      kids.push_back(pid);
    }
  }
  closedir(d);
  return kids;
}

// Slows process `pid` down, as a CPU quota would, from a thread of its
// own: in every `period` it runs for `run` and is held with SIGSTOP for the
// rest. Destroying it lets the process run on (SIGCONT).
class Throttle {
 public:
  Throttle(pid_t pid, std::chrono::milliseconds run, std::chrono::milliseconds period)
      : pid_(pid), thread_([this, run, period] {
          while (!done_.load()) {
            std::this_thread::sleep_for(run);
            if (done_.load() || kill(pid_, SIGSTOP) != 0) break;
            std::this_thread::sleep_for(period - run);
            kill(pid_, SIGCONT);
          }
        }) {}
  ~Throttle() {
    done_.store(true);
    thread_.join();
    kill(pid_, SIGCONT);
  }
  Throttle(const Throttle&) = delete;
  Throttle& operator=(const Throttle&) = delete;

 private:
  const pid_t pid_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

template <typename M>
bool ParseJson(const std::string& json, M* msg) {
  return google::protobuf::util::JsonStringToMessage(json, msg).ok();
}

// Polls `cond` every `every` (200 ms unless told) until it holds or
// `timeout` passes.
template <typename F>
bool WaitFor(F cond, std::chrono::seconds timeout,
             std::chrono::milliseconds every = std::chrono::milliseconds(200)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(every);
  }
  return cond();
}

// A loopback TCP port that was free a moment ago.
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A daemon in its own process group, SIGKILLed with its group (and its
// children: the worker's trainers) when the test ends, however it ends.
class Daemon {
 public:
  Daemon() = default;
  Daemon(const std::vector<std::string>& argv, const std::string& log) {
    auto pid = client::SpawnDaemon(argv, log);
    if (pid.ok()) pid_ = *pid;
  }
  Daemon(Daemon&& o) noexcept : pid_(o.pid_) { o.pid_ = 0; }
  Daemon& operator=(Daemon&& o) noexcept {
    Kill();
    pid_ = o.pid_;
    o.pid_ = 0;
    return *this;
  }
  ~Daemon() { Kill(); }
  pid_t pid() const { return pid_; }
  void Kill() {
    if (pid_ <= 0) return;
    for (pid_t c : ChildrenOf(pid_)) kill(c, SIGKILL);
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

 private:
  pid_t pid_ = 0;
};

// The last 4000 bytes of every *.log in `dir`, for failure messages.
inline std::string LogTails(const std::string& dir) {
  std::string out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".log") continue;
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > 4000) text = "..." + text.substr(text.size() - 4000);
    out += "==== " + e.path().string() + "\n" + text + "\n";
  }
  return out;
}

// A cluster's credentials made with the CLI, as an operator makes them:
// `yoke certs init DIR/ca`, then `yoke certs issue` into DIR/coordinator
// (for `coordinator_hosts`), DIR/admin and DIR/<id> for each worker id.
// Returns "" on success, else the failing command's output.
inline std::string IssueTestCerts(const std::string& dir,
                                  const std::vector<std::string>& coordinator_hosts,
                                  const std::vector<std::string>& worker_ids) {
  const std::string yoke = BinDir() + "/yoke certs ";
  std::vector<std::string> cmds = {yoke + "init " + dir + "/ca"};
  std::string hosts;
  for (const auto& h : coordinator_hosts) hosts += " --host " + h;
  cmds.push_back(yoke + "issue --ca " + dir + "/ca --role coordinator --name coordinator" + hosts +
                 " --out " + dir + "/coordinator");
  cmds.push_back(yoke + "issue --ca " + dir + "/ca --role admin --name admin --out " + dir +
                 "/admin");
  for (const auto& w : worker_ids) {
    cmds.push_back(yoke + "issue --ca " + dir + "/ca --role worker --name " + w + " --out " + dir +
                   "/" + w);
  }
  for (const auto& c : cmds) {
    RunResult r = Sh(c, true);
    if (r.exit_code != 0) return c + ":\n" + r.out;
  }
  return "";
}

class TestCluster {
 public:
  // `yoke up --detach --workers N` in a fresh directory; `up_flags` are
  // added to the command line. Check ok() (the up output is in up_output()).
  explicit TestCluster(int workers, const std::string& up_flags = "") {
    dir_ = MakeTempDir("yoke_e2e_cluster");
    RunResult r = Sh(Env() + BinDir() + "/yoke up --detach --workers " + std::to_string(workers) +
                         " --dir " + dir_ + " " + up_flags,
                     true);
    up_output_ = r.out;
    auto st = client::ReadClusterState(dir_ + "/cluster.json");
    if (r.exit_code == 0 && st.ok()) {
      state_ = *st;
      ok_ = true;
    }
  }

  ~TestCluster() {
    std::vector<pid_t> trainers;
    for (int w : state_.worker_pids) {
      for (pid_t t : ChildrenOf(w)) trainers.push_back(t);
    }
    Sh(Env() + BinDir() + "/yoke down --grace 5 --dir " + dir_ + " >/dev/null", true);
    // Whatever survived `yoke down` (or a cluster half started).
    std::vector<pid_t> all = state_.worker_pids;
    all.push_back(state_.coordinator_pid);
    all.insert(all.end(), trainers.begin(), trainers.end());
    for (pid_t p : all) {
      if (p > 0 && Alive(p)) {
        kill(-p, SIGKILL);
        kill(p, SIGKILL);
      }
    }
    if (!::testing::Test::HasFailure()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    } else {
      std::fprintf(stderr, "cluster directory kept for inspection: %s\n", dir_.c_str());
    }
  }

  bool ok() const { return ok_; }
  const std::string& up_output() const { return up_output_; }
  const std::string& dir() const { return dir_; }
  const std::string& address() const { return state_.address; }
  const client::ClusterState& state() const { return state_; }

  // The admin's channel credentials (`yoke up` makes them unless started
  // --insecure), for tests that call the coordinator in-process.
  std::shared_ptr<grpc::ChannelCredentials> Credentials() const {
    if (state_.tls_dir.empty()) return grpc::InsecureChannelCredentials();
    auto c = common::ReadCredentialsDir(state_.tls_dir, /*need_leaf=*/true);
    return c.ok() ? common::TlsChannelCredentials(*c) : grpc::InsecureChannelCredentials();
  }
  client::ClientOptions ClientOptions() const {
    client::ClientOptions o;
    o.credentials = Credentials();
    return o;
  }

  // `yoke ARGS --coordinator ADDR`.
  RunResult Yoke(const std::string& args, bool merge_stderr = false) const {
    return Sh(Env() + BinDir() + "/yoke " + args + " --coordinator " + state_.address,
              merge_stderr);
  }

  // The job as `yoke get ID --output json` prints it.
  bool GetJob(const std::string& id, v1::Job* job) const {
    RunResult r = Yoke("get " + id + " --output json");
    return r.exit_code == 0 && ParseJson(r.out, job);
  }

  // Polls job `id` into `*job` until it SUCCEEDED or FAILED (true) or
  // `timeout` passes (false).
  bool WaitForEnd(const std::string& id, v1::Job* job, std::chrono::seconds timeout) const {
    return WaitFor(
        [&] {
          return GetJob(id, job) &&
                 (job->state() == v1::JOB_SUCCEEDED || job->state() == v1::JOB_FAILED);
        },
        timeout);
  }

  // What SubmitAndWatch saw.
  struct Watched {
    std::string id;
    RunResult submit, watch;  // `yoke submit` and `yoke watch` (stderr merged)
    v1::Job job;              // the job after the watch ended
    double seconds = 0;       // submit to the end of the watch
  };
  // `yoke submit ARGS`, then `yoke watch` to the end, then the job as it
  // ended. False if the submission or reading the job failed (the job may
  // still have failed: check job.state()).
  bool SubmitAndWatch(const std::string& args, Watched* out) const {
    auto t0 = std::chrono::steady_clock::now();
    out->submit = Yoke("submit " + args, true);
    if (out->submit.exit_code != 0) return false;
    out->id = out->submit.out.substr(0, out->submit.out.find('\n'));
    out->watch = Yoke("watch " + out->id, true);
    out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return GetJob(out->id, &out->job);
  }

  // Logs of every daemon, for failure messages.
  std::string Logs() const { return LogTails(dir_); }

 private:
  std::string Env() const { return "YOKE_STATE_DIR=" + dir_ + "/state "; }

  std::string dir_;
  std::string up_output_;
  client::ClusterState state_;
  bool ok_ = false;
};

}  // namespace yoke::e2e

#endif  // YOKE_TESTS_E2E_UTIL_H_
