// `yoke up` and `yoke down`: a local cluster of daemons (RunUp, RunDown)
// and the process plumbing they share (spawning, waiting, stopping, logs).
// Over 600 lines because RunUp is one sequence (certificates, coordinator,
// workers, each checked before the next starts, with a clear message for
// each way it can fail); splitting it would scatter that sequence.
#include "client/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "client/cluster_state.h"
#include "common/flags.h"
#include "common/self_dir.h"
#include "common/status.h"
#include "security/certs.h"
#include "security/tls_credentials.h"

extern char** environ;

namespace yoke::client {

const char kUpDownUsage[] =
    "  up [--workers N] [--devices-per-worker K] [--dir DIR] [--port P]\n"
    "     [--data-root DIR ...] [--checkpoint-root DIR ...] [--detach] [--insecure]\n"
    "                      start a local coordinator and N workers (default 1 worker,\n"
    "                      1 cpu replica each) with mutual TLS (certificates in\n"
    "                      DIR/tls); Ctrl-C stops them\n"
    "  down [--dir DIR] [--grace SECONDS]\n"
    "                      stop the cluster `yoke up --detach` started\n";

namespace {

using Clock = std::chrono::steady_clock;

// True once `pid` no longer runs. Reaps it when it is our child; for a
// process we did not start (`yoke down`) a zombie counts as gone, since its
// parent (init, after `yoke up --detach` exited) reaps it soon.
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

// SIGTERM to all of `pids`, SIGKILL (to each one's process group too, which
// catches a trainer its worker could not stop) to those left after
// `grace`. Returns false if any survived SIGKILL for 5 s.
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

// Sleeps up to `d`, returning early (true) when SIGINT or SIGTERM arrives;
// both are blocked in `yoke up`, so they queue until taken here.
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

// The text of `path` from byte `offset` on.
std::string ReadFrom(const std::string& path, int64_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(offset);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
  return "stopped";
}

// A child that exited already: "<what> exited with status 2; its log (PATH) ends: ...".
std::string DiedMessage(const std::string& what, int status, const std::string& log) {
  return absl::StrCat(what, " ", DescribeExit(status), "; the end of its log (", log, "):\n",
                      LogTail(log));
}

struct Daemon {
  std::string what;  // "the coordinator", "worker 2"
  pid_t pid = 0;
  std::string log;
  int64_t log_offset = 0;  // where this run's output starts (logs append)
  bool dead = false;
};

// Non-blocking: true (and *status) when `d` has exited since we started it.
bool Exited(Daemon& d, int* status) {
  if (d.dead) return false;
  if (::waitpid(d.pid, status, WNOHANG) == d.pid) {
    d.dead = true;
    return true;
  }
  return false;
}

struct UpFlags {
  int workers = 1;
  int devices = 1;
  std::string dir;
  int port = 0;
  std::vector<std::string> data_roots;
  std::vector<std::string> checkpoint_roots;
  bool detach = false;
  bool json = false;
  bool insecure = false;
  int timeout_s = 90;
};

// The cluster's certificates under DIR/tls: the CA in ca/ (kept across runs,
// so that workers of an earlier run still trust the new coordinator), and
// credentials directories for the coordinator (its certificate names
// 127.0.0.1 and localhost, where `yoke up` listens), the admin (the CLI's)
// and workers w-1..w-N (each worker's id is its certificate's name).
absl::Status MakeClusterCerts(const std::string& dir, int workers) {
  const std::string tls = dir + "/tls";
  absl::StatusOr<common::KeyCert> ca = common::ReadCaDir(tls + "/ca");
  if (!ca.ok()) {
    ca = common::CreateCa(dir, absl::Hours(24 * 3650));
    if (!ca.ok()) return ca.status();
    RETURN_IF_ERROR(common::WriteCaDir(tls + "/ca", *ca));
  }
  common::IssueOptions o;
  o.role = common::Role::kCoordinator;
  o.name = "coordinator";
  o.hosts = {"127.0.0.1", "localhost"};
  RETURN_IF_ERROR(common::IssueCredentialsDir(*ca, o, tls + "/coordinator"));
  o = common::IssueOptions();
  o.role = common::Role::kAdmin;
  o.name = "admin";
  RETURN_IF_ERROR(common::IssueCredentialsDir(*ca, o, tls + "/admin"));
  for (int i = 1; i <= workers; ++i) {
    o.role = common::Role::kWorker;
    o.name = absl::StrCat("w-", i);
    RETURN_IF_ERROR(common::IssueCredentialsDir(*ca, o, absl::StrCat(tls, "/w-", i)));
  }
  return absl::OkStatus();
}

// The parser of `yoke up`, bound to `f`.
common::FlagParser UpParser(UpFlags* f) {
  common::FlagParser p("yoke up", absl::StrCat("usage: yoke", kUpDownUsage));
  p.Int("--workers", &f->workers, 1)
      .Int("--devices-per-worker", &f->devices, 1)
      .Int("--port", &f->port, 0, 65535)
      .Int("--timeout", &f->timeout_s, 1)
      .String("--dir", &f->dir)
      .Strings("--data-root", &f->data_roots)
      .Strings("--checkpoint-root", &f->checkpoint_roots)
      .Bool("--detach,-d", &f->detach)
      .Bool("--insecure", &f->insecure)
      .Custom("--output,-o", [f](const std::string& v) {
        if (v != "json" && v != "text") {
          return absl::InvalidArgumentError("--output: expected text or json");
        }
        f->json = v == "json";
        return absl::OkStatus();
      });
  return p;
}

std::string AbsolutePath(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) != nullptr) return buf;
  return p;
}

// True when the state at `path` still describes a coordinator that runs.
bool RecordedClusterRuns(const std::string& path, ClusterState* st) {
  auto s = ReadClusterState(path);
  if (!s.ok()) return false;
  *st = *s;
  return ProcessIsNamed(s->coordinator_pid, "yoke-coordinator");
}

void RemoveStateIfOurs(const std::string& path, int coordinator_pid) {
  auto s = ReadClusterState(path);
  if (s.ok() && s->coordinator_pid == coordinator_pid) ::unlink(path.c_str());
}

}  // namespace

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

bool StopProcess(pid_t pid, std::chrono::milliseconds grace) { return StopAll({pid}, grace); }

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

int RunUp(const std::vector<std::string>& args, FILE* out, FILE* err) {
  UpFlags f;
  common::FlagParser parser = UpParser(&f);
  std::vector<std::string> positional;
  if (auto code = parser.ParseOrExitCode(args, &positional, out, err)) return *code;
  if (!positional.empty()) {
    return parser.UsageError(err, absl::StrCat("unexpected argument '", positional[0], "'"));
  }
  const std::string bin = common::SelfDir();
  const std::string coord_bin = bin + "/yoke-coordinator";
  const std::string worker_bin = bin + "/yoke-worker";
  for (const auto& b : {coord_bin, worker_bin}) {
    if (::access(b.c_str(), X_OK) != 0) {
      std::fprintf(err, "yoke up: cannot find %s (it is built beside yoke: `make build`)\n",
                   b.c_str());
      return 1;
    }
  }
  const std::string state_path = DefaultClusterStatePath();
  if (ClusterState running; RecordedClusterRuns(state_path, &running)) {
    std::fprintf(err,
                 "yoke up: a local cluster is already running at %s (coordinator pid %d, "
                 "recorded in %s); stop it with `yoke down`\n",
                 running.address.c_str(), running.coordinator_pid, state_path.c_str());
    return 1;
  }
  if (f.dir.empty()) {
    char tmpl[] = "/tmp/yoke-cluster-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::fprintf(err, "yoke up: cannot create a directory in /tmp: %s\n", std::strerror(errno));
      return 1;
    }
    f.dir = tmpl;
  } else if (::mkdir(f.dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(err, "yoke up: --dir: cannot create %s: %s\n", f.dir.c_str(),
                 std::strerror(errno));
    return 1;
  }
  f.dir = AbsolutePath(f.dir);

  // A cluster that ran in this directory before: its coordinator must not
  // run still, its workers may (they outlive a coordinator crash and keep
  // training), and its port is reused so that they find the new one.
  std::vector<pid_t> adopted;  // the old run's workers, still alive
  if (ClusterState old; RecordedClusterRuns(f.dir + "/cluster.json", &old)) {
    std::fprintf(err,
                 "yoke up: the cluster in %s is already running at %s (coordinator pid %d); "
                 "stop it with `yoke down --dir %s`\n",
                 f.dir.c_str(), old.address.c_str(), old.coordinator_pid, f.dir.c_str());
    return 1;
  } else if (auto prev = ReadClusterState(f.dir + "/cluster.json"); prev.ok()) {
    for (int pid : prev->worker_pids) {
      if (ProcessIsNamed(pid, "yoke-worker")) adopted.push_back(pid);
    }
  }
  const std::string port_path = f.dir + "/coordinator.port";
  if (f.port == 0) {
    std::ifstream in(port_path);
    int recorded = 0;
    if (in >> recorded && recorded > 0 && recorded <= 65535) f.port = recorded;
  }

  // Before any thread exists (gRPC starts some), so that every thread
  // inherits the mask and the signals wait for sigtimedwait.
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &block, nullptr);

  std::vector<Daemon> daemons;  // [0] is the coordinator
  auto stop_everything = [&]() {
    std::vector<pid_t> workers;
    for (size_t i = 1; i < daemons.size(); ++i) {
      if (!daemons[i].dead) workers.push_back(daemons[i].pid);
    }
    workers.insert(workers.end(), adopted.begin(), adopted.end());
    StopAll(workers, std::chrono::seconds(10));
    if (!daemons.empty() && !daemons[0].dead) StopAll({daemons[0].pid}, std::chrono::seconds(10));
  };
  auto fail = [&](const std::string& msg) {
    std::fprintf(err, "yoke up: %s\n", msg.c_str());
    stop_everything();
    return 1;
  };
  auto start = [&](const std::string& what, std::vector<std::string> argv,
                   const std::string& log) -> absl::Status {
    Daemon d{what, 0, log, FileSize(log)};
    ASSIGN_OR_RETURN(d.pid, SpawnDaemon(argv, log));
    daemons.push_back(d);
    return absl::OkStatus();
  };

  if (!f.insecure) {
    if (auto s = MakeClusterCerts(f.dir, f.workers); !s.ok()) {
      return fail(absl::StrCat("cannot create the cluster's certificates in ", f.dir,
                               "/tls: ", s.message()));
    }
  }
  const std::string tls_dir = f.dir + "/tls";
  std::vector<std::string> cargv = {coord_bin, "--listen", absl::StrCat("127.0.0.1:", f.port),
                                    "--store", f.dir + "/coordinator.db"};
  if (f.insecure) {
    cargv.push_back("--insecure");
  } else {
    cargv.insert(cargv.end(), {"--tls-dir", tls_dir + "/coordinator"});
  }
  for (const auto& r : f.data_roots) cargv.insert(cargv.end(), {"--data-root", r});
  for (const auto& r : f.checkpoint_roots) cargv.insert(cargv.end(), {"--checkpoint-root", r});
  if (auto s = start("the coordinator", cargv, f.dir + "/coordinator.log"); !s.ok()) {
    return fail(std::string(s.message()));
  }

  const auto deadline = Clock::now() + std::chrono::seconds(f.timeout_s);
  const std::string kListening = "listening on ";
  // Printed before the gRPC line when the coordinator serves /metrics and
  // the dashboard (absent when that port was taken).
  const std::string kHttp = "yoke-coordinator http on ";
  // The whitespace-ended word after `prefix` in `text`, or "".
  auto word_after = [](const std::string& text, const std::string& prefix) -> std::string {
    size_t p = text.find(prefix);
    if (p == std::string::npos) return "";
    size_t b = p + prefix.size();
    size_t e = text.find_first_of(" \t\r\n", b);
    return e == std::string::npos ? "" : text.substr(b, e - b);
  };
  std::string address, http_address;
  while (address.empty()) {
    std::string text = ReadFrom(daemons[0].log, daemons[0].log_offset);
    address = word_after(text, kListening);
    if (!address.empty()) {
      http_address = word_after(text, kHttp);
      break;
    }
    int status;
    if (Exited(daemons[0], &status)) {
      return fail(DiedMessage("the coordinator", status, daemons[0].log));
    }
    if (Clock::now() > deadline) {
      return fail(absl::StrCat("the coordinator did not report its address within ", f.timeout_s,
                               "s; the end of its log (", daemons[0].log, "):\n",
                               LogTail(daemons[0].log)));
    }
    if (SleepOrSignal(std::chrono::milliseconds(50))) return fail("interrupted");
  }

  // The next `yoke up --dir` listens on the same port.
  if (size_t colon = address.rfind(':'); colon != std::string::npos) {
    std::ofstream(port_path) << address.substr(colon + 1) << "\n";
  }

  const int64_t started_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  if (!adopted.empty()) {
    std::fprintf(out,
                 "yoke up: %zu worker%s of the last run in %s still running; they register "
                 "again\n",
                 adopted.size(), adopted.size() == 1 ? "" : "s", f.dir.c_str());
    std::fflush(out);
  }
  for (int i = 1; adopted.empty() && i <= f.workers; ++i) {
    std::string wdir = absl::StrCat(f.dir, "/worker-", i);
    ::mkdir(wdir.c_str(), 0755);
    std::vector<std::string> wargv = {worker_bin,
                                      "--coordinator",
                                      address,
                                      "--cpu-replicas",
                                      std::to_string(f.devices),
                                      "--work-dir",
                                      wdir};
    if (f.insecure) {
      wargv.push_back("--insecure");
    } else {
      wargv.insert(wargv.end(), {"--tls-dir", absl::StrCat(tls_dir, "/w-", i)});
    }
    auto s = start(absl::StrCat("worker ", i), wargv, absl::StrCat(f.dir, "/worker-", i, ".log"));
    if (!s.ok()) return fail(std::string(s.message()));
  }

  // Registered workers, counting only registrations of this run: a reused
  // --dir store still lists the workers of the last one.
  ClientOptions client_options;
  client_options.unary_timeout = std::chrono::milliseconds(3000);
  if (!f.insecure) {
    auto admin = common::ReadCredentialsDir(tls_dir + "/admin", /*need_leaf=*/true);
    if (!admin.ok()) return fail(std::string(admin.status().message()));
    client_options.credentials = common::TlsChannelCredentials(*admin);
  }
  CoordinatorClient client(address, client_options);
  while (true) {
    auto ws = client.ListWorkers();
    int ready = 0;
    if (ws.ok()) {
      for (const auto& w : *ws) {
        if (w.alive() && w.register_time_ms() >= started_ms - 1000) ++ready;
      }
    }
    if (ready >= (adopted.empty() ? f.workers : static_cast<int>(adopted.size()))) break;
    for (auto& d : daemons) {
      int status;
      if (Exited(d, &status)) return fail(DiedMessage(d.what, status, d.log));
    }
    if (Clock::now() > deadline) {
      std::string msg = absl::StrCat("only ", ready, " of ", f.workers,
                                     " workers registered within ", f.timeout_s, "s");
      if (!ws.ok()) absl::StrAppend(&msg, " (", ws.status().message(), ")");
      for (size_t i = 1; i < daemons.size(); ++i) {
        std::string text = ReadFrom(daemons[i].log, daemons[i].log_offset);
        if (text.find("registered with") == std::string::npos) {
          absl::StrAppend(&msg, "\n", daemons[i].what, " has not registered; the end of its log (",
                          daemons[i].log, "):\n", LogTail(daemons[i].log));
        }
      }
      return fail(msg);
    }
    if (SleepOrSignal(std::chrono::milliseconds(200))) return fail("interrupted");
  }

  ClusterState st;
  st.address = address;
  st.dir = f.dir;
  st.tls_dir = f.insecure ? "" : tls_dir + "/admin";
  st.coordinator_pid = daemons[0].pid;
  for (size_t i = 1; i < daemons.size(); ++i) st.worker_pids.push_back(daemons[i].pid);
  st.worker_pids.insert(st.worker_pids.end(), adopted.begin(), adopted.end());
  st.up_pid = f.detach ? 0 : ::getpid();
  for (const auto& p : {state_path, f.dir + "/cluster.json"}) {
    if (auto s = WriteClusterState(st, p); !s.ok()) return fail(std::string(s.message()));
  }
  if (f.json) {
    std::ifstream in(state_path);
    std::stringstream ss;
    ss << in.rdbuf();
    std::fprintf(out, "%s\n", ss.str().c_str());
  } else {
    std::fprintf(out,
                 "yoke up: coordinator at %s, %d worker%s with %d cpu replica%s each\n"
                 "  store, logs and work dirs in %s\n",
                 address.c_str(), f.workers, f.workers == 1 ? "" : "s", f.devices,
                 f.devices == 1 ? "" : "s", f.dir.c_str());
    if (!http_address.empty()) {
      std::fprintf(out, "  dashboard and /metrics at http://%s/ (%s)\n", http_address.c_str(),
                   f.insecure ? "no authentication"
                              : "sign in once at /login?token=TOKEN, with a token from "
                                "`yoke token create --role viewer --name NAME`");
    }
    std::fprintf(out, "export YOKE_COORDINATOR=%s\n", address.c_str());
  }
  std::fflush(out);
  if (f.detach) {
    if (!f.json) std::fputs("(running in the background; stop it with `yoke down`)\n", out);
    return 0;
  }
  if (!f.json) std::fputs("(Ctrl-C stops the cluster)\n", out);
  std::fflush(out);

  int rc = 0;
  while (!SleepOrSignal(std::chrono::milliseconds(500))) {
    int status;
    if (Exited(daemons[0], &status)) {
      std::fprintf(err, "yoke up: %s\n",
                   DiedMessage("the coordinator", status, daemons[0].log).c_str());
      rc = 1;
      break;
    }
    for (size_t i = 1; i < daemons.size(); ++i) {
      if (Exited(daemons[i], &status)) {
        std::fprintf(err, "yoke up: warning: %s\n",
                     DiedMessage(daemons[i].what, status, daemons[i].log).c_str());
      }
    }
  }
  std::fputs("yoke up: stopping the workers, then the coordinator\n", out);
  std::fflush(out);
  stop_everything();
  RemoveStateIfOurs(state_path, st.coordinator_pid);
  RemoveStateIfOurs(f.dir + "/cluster.json", st.coordinator_pid);
  std::fprintf(out, "yoke up: stopped; logs are in %s\n", f.dir.c_str());
  return rc;
}

int RunDown(const std::vector<std::string>& args, FILE* out, FILE* err) {
  std::string dir;
  int grace_s = 10;
  common::FlagParser parser("yoke down", absl::StrCat("usage: yoke", kUpDownUsage));
  parser.String("--dir", &dir).Int("--grace", &grace_s, 0);
  std::vector<std::string> positional;
  if (auto code = parser.ParseOrExitCode(args, &positional, out, err)) return *code;
  if (!positional.empty()) {
    return parser.UsageError(err, absl::StrCat("unexpected argument '", positional[0], "'"));
  }
  const std::string global = DefaultClusterStatePath();
  const std::string path = dir.empty() ? global : AbsolutePath(dir) + "/cluster.json";
  auto st = ReadClusterState(path);
  if (!st.ok()) {
    if (st.status().code() == absl::StatusCode::kNotFound) {
      std::fprintf(out, "yoke down: no local cluster is recorded in %s; nothing to stop\n",
                   path.c_str());
      return 0;
    }
    std::fprintf(err, "yoke down: %s\n", std::string(st.status().message()).c_str());
    return 1;
  }
  const auto grace = std::chrono::seconds(grace_s);
  // A foreground `yoke up` owns the daemons: ask it, so it exits too.
  if (ProcessIsNamed(st->up_pid, "yoke")) {
    ::kill(st->up_pid, SIGTERM);
    auto deadline = Clock::now() + 2 * grace + std::chrono::seconds(10);
    while (!Gone(st->up_pid) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::vector<pid_t> workers;
  for (int p : st->worker_pids) {
    if (ProcessIsNamed(p, "yoke-worker")) workers.push_back(p);
  }
  bool ok = StopAll(workers, grace);
  if (ProcessIsNamed(st->coordinator_pid, "yoke-coordinator")) {
    ok = StopAll({st->coordinator_pid}, grace) && ok;
  }
  RemoveStateIfOurs(global, st->coordinator_pid);
  if (!st->dir.empty()) RemoveStateIfOurs(st->dir + "/cluster.json", st->coordinator_pid);
  if (!ok) {
    std::fprintf(err, "yoke down: some processes of the cluster at %s survived SIGKILL\n",
                 st->address.c_str());
    return 1;
  }
  std::fprintf(out, "yoke down: stopped the cluster at %s (%zu worker%s); logs are in %s\n",
               st->address.c_str(), st->worker_pids.size(), st->worker_pids.size() == 1 ? "" : "s",
               st->dir.c_str());
  return 0;
}

}  // namespace yoke::client
