// `yoke up` and `yoke down`: a local cluster of daemons (RunUp, RunDown).
// `yoke up` is one sequence of steps (class Up), each checked before the
// next starts, with a clear message for each way it can fail; the process
// plumbing they share is in daemon_process.cc.
#include "client/local_cluster.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/cluster_state.h"
#include "common/flags.h"
#include "common/self_dir.h"
#include "common/status.h"
#include "security/certs.h"
#include "security/tls_credentials.h"

namespace yoke::client {

const char kUpDownUsage[] =
    "  up [--workers N] [--devices-per-worker K] [--dir DIR] [--port P]\n"
    "     [--data-root DIR ...] [--checkpoint-root DIR ...] [--detach] [--insecure]\n"
    "     [--coordinator-config FILE] [--memory-limit SIZE]\n"
    "                      start a local coordinator and N workers (default 1 worker,\n"
    "                      1 cpu replica each) with mutual TLS (certificates in\n"
    "                      DIR/tls); Ctrl-C stops them. FILE: the coordinator's\n"
    "                      config (quotas, limits); yoke up sets its listen address,\n"
    "                      store and credentials; SIZE: each worker's --memory-limit\n"
    "  down [--dir DIR] [--grace SECONDS]\n"
    "                      stop the cluster `yoke up --detach` started\n";

namespace {

using Clock = std::chrono::steady_clock;

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
  std::string coordinator_config;  // --config for yoke-coordinator
  int64_t memory_limit = 0;        // each worker's --memory-limit; 0: its default
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
      .String("--coordinator-config", &f->coordinator_config)
      .Bytes("--memory-limit", &f->memory_limit, int64_t{64} << 20,
             "a size of at least 64MiB such as 2GiB, for each worker")
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

// The whitespace-ended word after `prefix` in `text`, or "".
std::string WordAfter(const std::string& text, const std::string& prefix) {
  size_t p = text.find(prefix);
  if (p == std::string::npos) return "";
  size_t b = p + prefix.size();
  size_t e = text.find_first_of(" \t\r\n", b);
  return e == std::string::npos ? "" : text.substr(b, e - b);
}

// One `yoke up`: its steps, in the order Run takes them, and what they
// share. A step that fails prints "yoke up: MESSAGE" and stops what was
// started (Fail); the exit code is then 1.
class Up {
 public:
  Up(UpFlags f, FILE* out, FILE* err) : f_(std::move(f)), out_(out), err_(err) {}

  int Run();

 private:
  // Finds yoke-coordinator and yoke-worker beside this program.
  bool FindDaemons();
  // Refuses to start beside a running cluster; creates --dir (or a
  // temporary directory) and makes it absolute.
  bool PrepareDir();
  // A cluster that ran in this directory before: its coordinator must not
  // run still, its workers may (they outlive a coordinator crash and keep
  // training), and its port is reused so that they find the new one.
  bool RecoverEarlierRun();
  // Starts the coordinator and reads the address it prints (and its HTTP
  // address, when it serves one); records the port for the next run.
  bool StartCoordinator();
  // Starts the workers (none when those of the last run still run).
  bool StartWorkers();
  // Waits until every worker registered in this run.
  bool WaitForWorkers();
  // Writes the state files and tells the user where the cluster is.
  bool WriteState();
  // In the foreground: waits for a signal or the coordinator's death, then
  // stops everything. Returns the exit code.
  int Supervise();

  // Starts a daemon and adds it to daemons_.
  absl::Status Start(const std::string& what, const std::vector<std::string>& argv,
                     const std::string& log);
  // Workers first (so they do not fail their attempts against a vanished
  // coordinator), then the coordinator.
  void StopEverything();
  // Prints the message, stops what was started, returns false.
  bool Fail(const std::string& message);

  UpFlags f_;
  FILE* out_;
  FILE* err_;
  std::string coord_bin_, worker_bin_, state_path_, tls_dir_;
  std::vector<pid_t> adopted_;   // the old run's workers, still alive
  std::vector<Daemon> daemons_;  // [0] is the coordinator
  Clock::time_point deadline_;
  int64_t started_ms_ = 0;
  std::string address_, http_address_;
  ClusterState state_;
};

int Up::Run() {
  if (!FindDaemons() || !PrepareDir() || !RecoverEarlierRun()) return 1;
  // Before any thread exists (gRPC starts some), so that every thread
  // inherits the mask and the signals wait for sigtimedwait.
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &block, nullptr);

  if (!f_.insecure) {
    if (auto s = MakeClusterCerts(f_.dir, f_.workers); !s.ok()) {
      Fail(absl::StrCat("cannot create the cluster's certificates in ", f_.dir,
                        "/tls: ", s.message()));
      return 1;
    }
  }
  tls_dir_ = f_.dir + "/tls";
  if (!StartCoordinator() || !StartWorkers() || !WaitForWorkers() || !WriteState()) return 1;
  if (f_.detach) {
    if (!f_.json) std::fputs("(running in the background; stop it with `yoke down`)\n", out_);
    return 0;
  }
  if (!f_.json) std::fputs("(Ctrl-C stops the cluster)\n", out_);
  std::fflush(out_);
  return Supervise();
}

bool Up::FindDaemons() {
  const std::string bin = common::SelfDir();
  coord_bin_ = bin + "/yoke-coordinator";
  worker_bin_ = bin + "/yoke-worker";
  for (const auto& b : {coord_bin_, worker_bin_}) {
    if (::access(b.c_str(), X_OK) != 0) {
      std::fprintf(err_, "yoke up: cannot find %s (it is built beside yoke: `make build`)\n",
                   b.c_str());
      return false;
    }
  }
  return true;
}

bool Up::PrepareDir() {
  state_path_ = DefaultClusterStatePath();
  if (ClusterState running; RecordedClusterRuns(state_path_, &running)) {
    std::fprintf(err_,
                 "yoke up: a local cluster is already running at %s (coordinator pid %d, "
                 "recorded in %s); stop it with `yoke down`\n",
                 running.address.c_str(), running.coordinator_pid, state_path_.c_str());
    return false;
  }
  if (f_.dir.empty()) {
    char tmpl[] = "/tmp/yoke-cluster-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::fprintf(err_, "yoke up: cannot create a directory in /tmp: %s\n", std::strerror(errno));
      return false;
    }
    f_.dir = tmpl;
  } else if (::mkdir(f_.dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(err_, "yoke up: --dir: cannot create %s: %s\n", f_.dir.c_str(),
                 std::strerror(errno));
    return false;
  }
  f_.dir = AbsolutePath(f_.dir);
  if (!f_.coordinator_config.empty()) {
    if (::access(f_.coordinator_config.c_str(), R_OK) != 0) {
      std::fprintf(err_, "yoke up: --coordinator-config: cannot read %s: %s\n",
                   f_.coordinator_config.c_str(), std::strerror(errno));
      return false;
    }
    f_.coordinator_config = AbsolutePath(f_.coordinator_config);
  }
  return true;
}

bool Up::RecoverEarlierRun() {
  if (ClusterState old; RecordedClusterRuns(f_.dir + "/cluster.json", &old)) {
    std::fprintf(err_,
                 "yoke up: the cluster in %s is already running at %s (coordinator pid %d); "
                 "stop it with `yoke down --dir %s`\n",
                 f_.dir.c_str(), old.address.c_str(), old.coordinator_pid, f_.dir.c_str());
    return false;
  } else if (auto prev = ReadClusterState(f_.dir + "/cluster.json"); prev.ok()) {
    for (int pid : prev->worker_pids) {
      if (ProcessIsNamed(pid, "yoke-worker")) adopted_.push_back(pid);
    }
  }
  if (f_.port == 0) {
    std::ifstream in(f_.dir + "/coordinator.port");
    int recorded = 0;
    if (in >> recorded && recorded > 0 && recorded <= 65535) f_.port = recorded;
  }
  return true;
}

absl::Status Up::Start(const std::string& what, const std::vector<std::string>& argv,
                       const std::string& log) {
  Daemon d{what, 0, log, FileSize(log)};
  ASSIGN_OR_RETURN(d.pid, SpawnDaemon(argv, log));
  daemons_.push_back(d);
  return absl::OkStatus();
}

void Up::StopEverything() {
  std::vector<pid_t> workers;
  for (size_t i = 1; i < daemons_.size(); ++i) {
    if (!daemons_[i].dead) workers.push_back(daemons_[i].pid);
  }
  workers.insert(workers.end(), adopted_.begin(), adopted_.end());
  StopAll(workers, std::chrono::seconds(10));
  if (!daemons_.empty() && !daemons_[0].dead) StopAll({daemons_[0].pid}, std::chrono::seconds(10));
}

bool Up::Fail(const std::string& message) {
  std::fprintf(err_, "yoke up: %s\n", message.c_str());
  StopEverything();
  return false;
}

bool Up::StartCoordinator() {
  std::vector<std::string> argv = {coord_bin_, "--listen", absl::StrCat("127.0.0.1:", f_.port),
                                   "--store", f_.dir + "/coordinator.db"};
  if (f_.insecure) {
    argv.push_back("--insecure");
  } else {
    argv.insert(argv.end(), {"--tls-dir", tls_dir_ + "/coordinator"});
  }
  for (const auto& r : f_.data_roots) argv.insert(argv.end(), {"--data-root", r});
  for (const auto& r : f_.checkpoint_roots) argv.insert(argv.end(), {"--checkpoint-root", r});
  // The command line above overrides the file's listen, store and TLS
  // settings (coordinator/main_options.h); the rest of the file applies.
  if (!f_.coordinator_config.empty()) {
    argv.insert(argv.end(), {"--config", f_.coordinator_config});
  }
  if (auto s = Start("the coordinator", argv, f_.dir + "/coordinator.log"); !s.ok()) {
    return Fail(std::string(s.message()));
  }

  deadline_ = Clock::now() + std::chrono::seconds(f_.timeout_s);
  const Daemon& c = daemons_[0];
  while (address_.empty()) {
    std::string text = ReadFrom(c.log, c.log_offset);
    address_ = WordAfter(text, "listening on ");
    if (!address_.empty()) {
      // Printed before the gRPC line when the coordinator serves /metrics
      // and the dashboard (absent when that port was taken).
      http_address_ = WordAfter(text, "yoke-coordinator http on ");
      break;
    }
    int status;
    if (Exited(daemons_[0], &status)) return Fail(DiedMessage("the coordinator", status, c.log));
    if (Clock::now() > deadline_) {
      return Fail(absl::StrCat("the coordinator did not report its address within ", f_.timeout_s,
                               "s; the end of its log (", c.log, "):\n", LogTail(c.log)));
    }
    if (SleepOrSignal(std::chrono::milliseconds(50))) return Fail("interrupted");
  }

  // The next `yoke up --dir` listens on the same port.
  if (size_t colon = address_.rfind(':'); colon != std::string::npos) {
    std::ofstream(f_.dir + "/coordinator.port") << address_.substr(colon + 1) << "\n";
  }
  return true;
}

bool Up::StartWorkers() {
  started_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  if (!adopted_.empty()) {
    std::fprintf(out_,
                 "yoke up: %zu worker%s of the last run in %s still running; they register "
                 "again\n",
                 adopted_.size(), adopted_.size() == 1 ? "" : "s", f_.dir.c_str());
    std::fflush(out_);
  }
  for (int i = 1; adopted_.empty() && i <= f_.workers; ++i) {
    std::string wdir = absl::StrCat(f_.dir, "/worker-", i);
    ::mkdir(wdir.c_str(), 0755);
    std::vector<std::string> argv = {worker_bin_,
                                     "--coordinator",
                                     address_,
                                     "--cpu-replicas",
                                     std::to_string(f_.devices),
                                     "--work-dir",
                                     wdir};
    if (f_.memory_limit > 0) {
      argv.insert(argv.end(), {"--memory-limit", std::to_string(f_.memory_limit)});
    }
    if (f_.insecure) {
      argv.push_back("--insecure");
    } else {
      argv.insert(argv.end(), {"--tls-dir", absl::StrCat(tls_dir_, "/w-", i)});
    }
    auto s = Start(absl::StrCat("worker ", i), argv, absl::StrCat(f_.dir, "/worker-", i, ".log"));
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  return true;
}

bool Up::WaitForWorkers() {
  // Registered workers, counting only registrations of this run: a reused
  // --dir store still lists the workers of the last one.
  ClientOptions client_options;
  client_options.unary_timeout = std::chrono::milliseconds(3000);
  if (!f_.insecure) {
    auto admin = common::ReadCredentialsDir(tls_dir_ + "/admin", /*need_leaf=*/true);
    if (!admin.ok()) return Fail(std::string(admin.status().message()));
    client_options.credentials = common::TlsChannelCredentials(*admin);
  }
  CoordinatorClient client(address_, client_options);
  const int expected = adopted_.empty() ? f_.workers : static_cast<int>(adopted_.size());
  while (true) {
    auto ws = client.ListWorkers();
    int ready = 0;
    if (ws.ok()) {
      for (const auto& w : *ws) {
        if (w.alive() && w.register_time_ms() >= started_ms_ - 1000) ++ready;
      }
    }
    if (ready >= expected) return true;
    for (auto& d : daemons_) {
      int status;
      if (Exited(d, &status)) return Fail(DiedMessage(d.what, status, d.log));
    }
    if (Clock::now() > deadline_) {
      std::string msg = absl::StrCat("only ", ready, " of ", f_.workers,
                                     " workers registered within ", f_.timeout_s, "s");
      if (!ws.ok()) absl::StrAppend(&msg, " (", ws.status().message(), ")");
      for (size_t i = 1; i < daemons_.size(); ++i) {
        std::string text = ReadFrom(daemons_[i].log, daemons_[i].log_offset);
        if (text.find("registered with") == std::string::npos) {
          absl::StrAppend(&msg, "\n", daemons_[i].what, " has not registered; the end of its log (",
                          daemons_[i].log, "):\n", LogTail(daemons_[i].log));
        }
      }
      return Fail(msg);
    }
    if (SleepOrSignal(std::chrono::milliseconds(200))) return Fail("interrupted");
  }
}

bool Up::WriteState() {
  state_.address = address_;
  state_.dir = f_.dir;
  state_.tls_dir = f_.insecure ? "" : tls_dir_ + "/admin";
  state_.coordinator_pid = daemons_[0].pid;
  for (size_t i = 1; i < daemons_.size(); ++i) state_.worker_pids.push_back(daemons_[i].pid);
  state_.worker_pids.insert(state_.worker_pids.end(), adopted_.begin(), adopted_.end());
  state_.up_pid = f_.detach ? 0 : ::getpid();
  for (const auto& p : {state_path_, f_.dir + "/cluster.json"}) {
    if (auto s = WriteClusterState(state_, p); !s.ok()) return Fail(std::string(s.message()));
  }
  if (f_.json) {
    std::ifstream in(state_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    std::fprintf(out_, "%s\n", ss.str().c_str());
  } else {
    std::fprintf(out_,
                 "yoke up: coordinator at %s, %d worker%s with %d cpu replica%s each\n"
                 "  store, logs and work dirs in %s\n",
                 address_.c_str(), f_.workers, f_.workers == 1 ? "" : "s", f_.devices,
                 f_.devices == 1 ? "" : "s", f_.dir.c_str());
    if (!http_address_.empty()) {
      std::fprintf(out_, "  dashboard and /metrics at http://%s/ (%s)\n", http_address_.c_str(),
                   f_.insecure ? "no authentication"
                               : "sign in once at /login?token=TOKEN, with a token from "
                                 "`yoke token create --role viewer --name NAME`");
    }
    std::fprintf(out_, "export YOKE_COORDINATOR=%s\n", address_.c_str());
  }
  std::fflush(out_);
  return true;
}

int Up::Supervise() {
  int rc = 0;
  while (!SleepOrSignal(std::chrono::milliseconds(500))) {
    int status;
    if (Exited(daemons_[0], &status)) {
      std::fprintf(err_, "yoke up: %s\n",
                   DiedMessage("the coordinator", status, daemons_[0].log).c_str());
      rc = 1;
      break;
    }
    for (size_t i = 1; i < daemons_.size(); ++i) {
      if (Exited(daemons_[i], &status)) {
        std::fprintf(err_, "yoke up: warning: %s\n",
                     DiedMessage(daemons_[i].what, status, daemons_[i].log).c_str());
      }
    }
  }
  std::fputs("yoke up: stopping the workers, then the coordinator\n", out_);
  std::fflush(out_);
  StopEverything();
  RemoveStateIfOurs(state_path_, state_.coordinator_pid);
  RemoveStateIfOurs(f_.dir + "/cluster.json", state_.coordinator_pid);
  std::fprintf(out_, "yoke up: stopped; logs are in %s\n", f_.dir.c_str());
  return rc;
}

}  // namespace

int RunUp(const std::vector<std::string>& args, FILE* out, FILE* err) {
  UpFlags f;
  common::FlagParser parser = UpParser(&f);
  std::vector<std::string> positional;
  if (auto code = parser.ParseOrExitCode(args, &positional, out, err)) return *code;
  if (!positional.empty()) {
    return parser.UsageError(err, absl::StrCat("unexpected argument '", positional[0], "'"));
  }
  return Up(std::move(f), out, err).Run();
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
