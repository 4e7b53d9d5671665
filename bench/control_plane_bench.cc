// Control-plane benchmark: W simulated workers heartbeat at 1 Hz while
// clients submit, list and watch jobs; reports RPC latency percentiles and
// the coordinator's CPU use.
//
//   control_plane_bench [--workers 2000] [--seconds 20] [--threads 8]
//                       [--submit-rate 10] [--watchers 4] [--store sqlite|memory]
//                       [--connect HOST:PORT] [--tls 0|1]
//   control_plane_bench --list-jobs 10000 [--rounds 20] [--store ...]
//
// --list-jobs N times ListJobs instead, with N jobs in the store and no
// fleet (bench/control_plane_list.h).
//
// --tls 1 runs the coordinator with mutual TLS as `yoke up` does (a CA made
// for the run): the simulated workers present one pool certificate
// ("sim-*", so each registers as sim-sim-<i>) per connection and the clients
// an admin certificate, so every call pays TLS and the per-call identity and
// role checks.
//
// By default the coordinator (real services, real gRPC on 127.0.0.1, a SQLite
// store in a temp file) runs in a child process forked before any thread
// starts, so its CPU time (from /proc/<pid>/stat) is separate from the
// simulated fleet's; --connect uses a running coordinator instead (no CPU
// figure then).
//
// Each simulated worker has one cpu device and heartbeats once a second at
// its own phase, so the load is spread evenly over the second. A worker
// reports every attempt the coordinator wants it to run as RUNNING (with
// progress and one log line) for 4 heartbeats, then as EXITED 0 with a
// result; jobs are 1 worker x 1 cpu, so submitted jobs flow through
// PENDING -> SCHEDULED -> RUNNING -> SUCCEEDED on the fleet. Before timing,
// one job is driven to SUCCEEDED to check the whole path works; the run
// fails if any heartbeat fails or no job succeeds.
//
// Targets (issue 3, on the 2-core machine): 2,000 workers with heartbeat
// p99 < 20 ms and SubmitJob p99 < 20 ms.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/control_plane_list.h"
#include "bench/control_plane_samples.h"
#include "common/logging.h"
#include "config/config.h"
#include "coordinator/auth_store.h"
#include "coordinator/coordinator.h"
#include "coordinator/grpc_service.h"
#include "coordinator/sqlite_job_store.h"
#include "grpcpp/grpcpp.h"
#include "proto/yoke/v1/coordinator.grpc.pb.h"
#include "security/certs.h"
#include "security/tls_credentials.h"

namespace v1 = yoke::v1;
using yoke::bench::Micros;
using yoke::bench::Report;
using yoke::bench::Samples;

namespace {

struct Flags {
  int workers = 2000;
  int seconds = 20;
  bool tls = false;
  // With --tls: the cluster CA and the credentials the parties present.
  yoke::common::Credentials coordinator_creds, worker_creds, admin_creds;
  int threads = 8;
  double submit_rate = 10;
  int watchers = 4;
  std::string store = "sqlite";
  std::string connect;
  int list_jobs = 0;  // > 0: the ListJobs run (bench/control_plane_list.h)
  int rounds = 20;
};

constexpr char kSpec[] = R"(
name: bench
model: {zoo: mlp, hidden: [8]}
data:
  train: {format: synthetic, shape: [4, 4, 1], num_classes: 2, num_examples: 64}
training:
  epochs: 1
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
)";

// utime + stime of `pid` in seconds.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  // Fields after the command: state is field 3; utime 14, stime 15.
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / sysconf(_SC_CLK_TCK);
}

// The child: serve until killed. Writes the address to `fd`.
[[noreturn]] void RunCoordinator(const Flags& f, int fd) {
  yoke::common::InitLogging("coordinator", "warn");
  std::unique_ptr<yoke::server::JobStore> store;
  std::string path;
  if (f.store == "memory") {
    store = std::make_unique<yoke::server::InMemoryJobStore>();
  } else {
    path = absl::StrCat("/tmp/control_plane_bench_", getpid(), ".db");
    for (const char* sfx : {"", "-wal", "-shm"}) std::remove((path + sfx).c_str());
    auto s = yoke::server::SqliteJobStore::Open(path);
    if (!s.ok()) {
      std::fprintf(stderr, "store: %s\n", s.status().ToString().c_str());
      _exit(1);
    }
    store = std::move(*s);
  }
  auto c = yoke::server::Coordinator::Create(store.get(), yoke::common::RealClock::Get(), {});
  if (!c.ok()) _exit(1);
  yoke::server::ServerOptions so;
  so.listen = "127.0.0.1:0";
  std::unique_ptr<yoke::server::AuthStore> auth;
  if (f.tls) {
    auth = std::move(*yoke::server::AuthStore::Open(":memory:"));
    so.tls = f.coordinator_creds;
    so.auth_store = auth.get();
  }
  auto server = yoke::server::CoordinatorServer::Start(c->get(), so);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    _exit(1);
  }
  std::string addr = (*server)->address() + "\n";
  if (write(fd, addr.data(), addr.size()) < 0) _exit(1);
  close(fd);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  int sig;
  sigwait(&set, &sig);
  for (const char* sfx : {"", "-wal", "-shm"}) {
    if (!path.empty()) std::remove((path + sfx).c_str());
  }
  _exit(0);
}

struct SimWorker {
  std::string id;
  std::map<std::pair<std::string, int>, int> beats;  // attempt -> heartbeats reported
};

// Builds the statuses a worker reports, from the last desired list.
void FillStatuses(SimWorker& w, const v1::HeartbeatResponse& last, v1::HeartbeatRequest* req) {
  std::map<std::pair<std::string, int>, int> keep;
  for (const v1::DesiredAttempt& d : last.desired()) {
    auto key = std::make_pair(d.job_id(), d.attempt());
    int n = ++w.beats[key];
    keep[key] = n;
    v1::AttemptStatus* st = req->add_attempts();
    st->set_job_id(d.job_id());
    st->set_attempt(d.attempt());
    if (n <= 4) {
      st->set_phase(v1::AttemptStatus::RUNNING);
      st->mutable_progress()->set_step(n * 10);
      st->mutable_progress()->set_total_steps(40);
      st->mutable_progress()->set_loss(1.0 / n);
      st->add_logs()->set_text(absl::StrCat("step ", n * 10, "/40 loss ", 1.0 / n));
    } else {
      st->set_phase(v1::AttemptStatus::EXITED);
      st->set_exit_code(0);
      st->mutable_result()->set_test_accuracy(0.9);
      st->mutable_result()->set_steps(40);
    }
  }
  w.beats = std::move(keep);
}

// Reads the flags into `f`; exit status 2 (after saying why) on a bad one, 0
// when they are all good.
int ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    bool ok = true;
    if (a == "--workers")
      ok = absl::SimpleAtoi(v, &f->workers);
    else if (a == "--seconds")
      ok = absl::SimpleAtoi(v, &f->seconds);
    else if (a == "--threads")
      ok = absl::SimpleAtoi(v, &f->threads);
    else if (a == "--submit-rate")
      ok = absl::SimpleAtod(v, &f->submit_rate);
    else if (a == "--watchers")
      ok = absl::SimpleAtoi(v, &f->watchers);
    else if (a == "--store")
      f->store = v;
    else if (a == "--connect")
      f->connect = v;
    else if (a == "--tls")
      f->tls = v == "1";
    else if (a == "--list-jobs")
      ok = absl::SimpleAtoi(v, &f->list_jobs);
    else if (a == "--rounds")
      ok = absl::SimpleAtoi(v, &f->rounds);
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, "control_plane_bench: bad argument %s %s\n", a.c_str(), v.c_str());
      return 2;
    }
  }
  return 0;
}

// With --tls: a CA for the run and the three identities, into `f`. Must run
// before the fork and before any thread. False when one cannot be made.
bool MakeCredentials(Flags* f) {
  auto ca = yoke::common::CreateCa("bench", absl::Hours(24));
  if (!ca.ok()) return false;
  auto issue = [&](yoke::common::Role role, const std::string& name,
                   yoke::common::Credentials* out) {
    yoke::common::IssueOptions o;
    o.role = role;
    o.name = name;
    o.hosts = {"127.0.0.1"};
    auto leaf = yoke::common::IssueCert(*ca, o);
    if (!leaf.ok()) return false;
    out->ca_pem = ca->cert_pem;
    out->leaf = *leaf;
    return true;
  };
  if (!issue(yoke::common::Role::kCoordinator, "coordinator", &f->coordinator_creds) ||
      !issue(yoke::common::Role::kWorker, "sim-*", &f->worker_creds) ||
      !issue(yoke::common::Role::kAdmin, "bench", &f->admin_creds)) {
    std::fprintf(stderr, "control_plane_bench: cannot make certificates\n");
    return false;
  }
  return true;
}

// Forks the coordinator (RunCoordinator) and reads the address it serves on
// into `address`, its pid into `child`. Must run before any thread exists.
// False when it did not start.
bool StartCoordinatorChild(const Flags& f, std::string* address, pid_t* child) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  // The child blocks SIGTERM to sigwait it.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  *child = fork();
  if (*child == 0) {
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    close(fds[0]);
    RunCoordinator(f, fds[1]);
  }
  close(fds[1]);
  char buf[128];
  ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  if (n <= 0) {
    std::fprintf(stderr, "control_plane_bench: the coordinator did not start\n");
    return false;
  }
  address->assign(buf, n - 1);
  return true;
}

// One channel per heartbeat thread plus one (the last) for clients: several
// HTTP/2 connections, as many worker machines would have.
std::vector<std::shared_ptr<grpc::Channel>> MakeChannels(const Flags& f,
                                                         const std::string& address) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int t = 0; t <= f.threads; ++t) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", t);  // distinct args: distinct connections
    std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
    if (f.tls) {
      creds = yoke::common::TlsChannelCredentials(t == f.threads ? f.admin_creds : f.worker_creds);
    }
    channels.push_back(grpc::CreateCustomChannel(address, creds, args));
  }
  return channels;
}

// Registers the fleet, thread t registering workers t, t+T, ...; their ids go
// into `workers`. False (after saying how many) when any registration failed.
bool RegisterFleet(const Flags& f, const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                   std::vector<SimWorker>* workers) {
  std::vector<std::thread> ts;
  std::atomic<int> failed{0};
  for (int t = 0; t < f.threads; ++t) {
    ts.emplace_back([&, t] {
      auto stub = v1::WorkerControl::NewStub(channels[t]);
      for (int i = t; i < f.workers; i += f.threads) {
        grpc::ClientContext ctx;
        v1::RegisterWorkerRequest req;
        req.set_hostname(absl::StrCat("sim-", i));
        v1::Device* d = req.add_devices();
        d->set_kind("cpu");
        d->set_index(0);
        v1::RegisterWorkerResponse resp;
        if (!stub->RegisterWorker(&ctx, req, &resp).ok()) ++failed;
        (*workers)[i].id = resp.worker_id();
      }
    });
  }
  for (auto& t : ts) t.join();
  if (failed) {
    std::fprintf(stderr, "control_plane_bench: %d registrations failed\n", failed.load());
    return false;
  }
  return true;
}

// What the heartbeat threads and the clients share during a run.
struct Run {
  Run(const Flags& f, const v1::JobSpec& spec, v1::Coordinator::Stub* client)
      : f(f), spec(spec), client(client) {}
  const Flags& f;
  v1::JobSpec spec;
  v1::Coordinator::Stub* client;
  std::atomic<bool> stop{false};
  std::atomic<bool> timing{false};  // heartbeat samples count from the timed start
  Samples hb, submit, list, watch_first;
  std::atomic<int64_t> hb_late{0};
  std::atomic<int64_t> watch_events{0}, watched_to_end{0};
  std::mutex ids_mu;
  std::vector<std::string> ids;  // submitted in the timed run; guarded by ids_mu
};

// Heartbeat thread t until run.stop: it owns workers t, t+T, ...; worker i
// beats at phase i/W of every second from t0.
void HeartbeatLoop(Run& run, const std::shared_ptr<grpc::Channel>& channel,
                   std::vector<SimWorker>& workers, int t, absl::Time t0) {
  const Flags& f = run.f;
  auto stub = v1::WorkerControl::NewStub(channel);
  std::vector<v1::HeartbeatResponse> last(f.workers);
  std::vector<double> local;
  for (int64_t round = 0; !run.stop; ++round) {
    for (int i = t; i < f.workers && !run.stop; i += f.threads) {
      const absl::Time due =
          t0 + absl::Seconds(round) + absl::Seconds(1) * (static_cast<double>(i) / f.workers);
      const absl::Time now = absl::Now();
      if (due > now) {
        absl::SleepFor(due - now);
      } else if (now - due > absl::Milliseconds(100)) {
        ++run.hb_late;
      }
      v1::HeartbeatRequest req;
      req.set_worker_id(workers[i].id);
      FillStatuses(workers[i], last[i], &req);
      grpc::ClientContext ctx;
      const absl::Time start = absl::Now();
      grpc::Status s = stub->Heartbeat(&ctx, req, &last[i]);
      const double us = Micros(start);
      if (run.timing) local.push_back(us);
      if (!s.ok()) ++run.hb.errors;
    }
  }
  run.hb.AddAll(local);
}

// Checks the path end to end before timing: submits one job and watches it
// to its end. True (after printing the check line) when it SUCCEEDED.
bool CheckOneJob(Run& run, absl::Time t0) {
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  *req.mutable_spec() = run.spec;
  v1::SubmitJobResponse resp;
  if (!run.client->SubmitJob(&ctx, req, &resp).ok()) return false;
  grpc::ClientContext wctx;
  v1::WatchJobRequest wreq;
  wreq.set_job_id(resp.job_id());
  wctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = run.client->WatchJob(&wctx, wreq);
  v1::JobEvent ev;
  v1::JobState final_state = v1::JOB_STATE_UNSPECIFIED;
  while (reader->Read(&ev)) final_state = ev.job().state();
  reader->Finish();
  if (final_state != v1::JOB_SUCCEEDED) {
    std::fprintf(stderr, "control_plane_bench: check job ended %s, not SUCCEEDED\n",
                 v1::JobState_Name(final_state).c_str());
    return false;
  }
  std::printf("check: %s SUCCEEDED through the simulated fleet (%.1f s after start)\n",
              resp.job_id().c_str(), absl::ToDoubleSeconds(absl::Now() - t0));
  return true;
}

// The submitter, until run.stop: one job per 1/--submit-rate seconds.
void SubmitLoop(Run& run) {
  const absl::Duration period = absl::Seconds(1.0 / run.f.submit_rate);
  absl::Time next = absl::Now();
  while (!run.stop) {
    absl::SleepFor(next - absl::Now());
    next += period;
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    *req.mutable_spec() = run.spec;
    v1::SubmitJobResponse resp;
    const absl::Time start = absl::Now();
    grpc::Status s = run.client->SubmitJob(&ctx, req, &resp);
    run.submit.Add(Micros(start));
    if (!s.ok()) {
      ++run.submit.errors;
      continue;
    }
    std::lock_guard<std::mutex> l(run.ids_mu);
    run.ids.push_back(resp.job_id());
  }
}

// The lister, until run.stop: the newest page, twice a second.
void ListLoop(Run& run) {
  while (!run.stop) {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(100);
    v1::ListJobsResponse resp;
    const absl::Time start = absl::Now();
    if (!run.client->ListJobs(&ctx, req, &resp).ok()) ++run.list.errors;
    run.list.Add(Micros(start));
    absl::SleepFor(absl::Milliseconds(500));
  }
}

// A watcher, until run.stop: follows the newest job to its end, again and
// again; no watch outlives timed_end by more than 500 ms.
void WatchLoop(Run& run, absl::Time timed_end) {
  while (!run.stop) {
    std::string id;
    {
      std::lock_guard<std::mutex> l(run.ids_mu);
      if (!run.ids.empty()) id = run.ids.back();
    }
    if (id.empty()) {
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    grpc::ClientContext ctx;
    // Ends with the run: a watched job stops changing once the fleet stops.
    ctx.set_deadline(absl::ToChronoTime(timed_end + absl::Milliseconds(500)));
    v1::WatchJobRequest req;
    req.set_job_id(id);
    const absl::Time start = absl::Now();
    auto reader = run.client->WatchJob(&ctx, req);
    v1::JobEvent ev;
    bool first = true;
    while (!run.stop && reader->Read(&ev)) {
      if (first) run.watch_first.Add(Micros(start));
      first = false;
      ++run.watch_events;
      if (yoke::server::IsTerminal(ev.job().state())) ++run.watched_to_end;
    }
    if (run.stop) ctx.TryCancel();
    reader->Finish();
  }
}

// How many jobs SUCCEEDED, of the newest 1000; 0 when the list fails.
int CountSucceeded(v1::Coordinator::Stub* client) {
  grpc::ClientContext ctx;
  v1::ListJobsRequest req;
  req.add_states(v1::JOB_SUCCEEDED);
  req.set_page_size(1000);
  v1::ListJobsResponse resp;
  return client->ListJobs(&ctx, req, &resp).ok() ? resp.jobs_size() : 0;
}

// Prints the results of a finished run of `wall` seconds (the coordinator's
// CPU seconds from cpu0 to cpu1, where it is our child) and returns the exit
// status: 1 when a heartbeat failed or no job succeeded.
int PrintResults(Run& run, double wall, bool child, double cpu0, double cpu1, int succeeded) {
  Samples& hb = run.hb;
  std::printf("%s%s%s%s", Report("Heartbeat", hb).c_str(), Report("SubmitJob", run.submit).c_str(),
              Report("ListJobs", run.list).c_str(),
              Report("WatchJob 1st", run.watch_first).c_str());
  std::printf("heartbeats/s: %.0f (target %d), sent >100 ms late: %lld\n", hb.us.size() / wall,
              run.f.workers, static_cast<long long>(run.hb_late.load()));
  std::printf(
      "jobs: %zu submitted, %d succeeded (newest 1000 counted), watch events %lld, "
      "watches to the end %lld\n",
      run.ids.size(), succeeded, static_cast<long long>(run.watch_events.load()),
      static_cast<long long>(run.watched_to_end.load()));
  if (child) {
    std::printf("coordinator CPU: %.2f s over %.1f s wall = %.0f%% of one core\n", cpu1 - cpu0,
                wall, 100 * (cpu1 - cpu0) / wall);
  }
  std::lock_guard<std::mutex> l1(hb.mu), l2(run.submit.mu);
  auto p99 = [](std::vector<double>& v) {
    return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(0.99 * v.size()))] / 1000;
  };
  std::printf("target: heartbeat p99 < 20 ms: %s; SubmitJob p99 < 20 ms: %s\n",
              p99(hb.us) < 20 ? "met" : "MISSED", p99(run.submit.us) < 20 ? "met" : "MISSED");
  if (hb.errors > 0 || succeeded == 0) {
    std::fprintf(stderr, "control_plane_bench: FAILED (%lld heartbeat errors, %d jobs succeeded)\n",
                 static_cast<long long>(hb.errors.load()), succeeded);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (int rc = ParseFlags(argc, argv, &f); rc != 0) return rc;
  if (f.tls && !MakeCredentials(&f)) return 1;
  std::string address = f.connect;
  pid_t child = 0;
  if (address.empty() && !StartCoordinatorChild(f, &address, &child)) return 1;
  if (f.list_jobs == 0)
    std::printf(
        "coordinator at %s (%s); %d workers, %d heartbeat threads, %.1f submits/s, "
        "%d watchers, %d s, %s\n",
        address.c_str(),
        f.connect.empty() ? ("in a child process, " + f.store + " store").c_str() : "external",
        f.workers, f.threads, f.submit_rate, f.watchers, f.seconds,
        f.tls ? "mutual TLS" : "plaintext");

  auto spec = yoke::common::LoadJobSpecString(kSpec, {});
  if (!spec.ok()) return 1;
  const std::vector<std::shared_ptr<grpc::Channel>> channels = MakeChannels(f, address);
  auto client = v1::Coordinator::NewStub(channels[f.threads]);
  if (f.list_jobs > 0) {
    std::printf(
        "coordinator at %s (%s)\n", address.c_str(),
        f.connect.empty() ? ("in a child process, " + f.store + " store").c_str() : "external");
    const int rc = yoke::bench::ListJobsBench(client.get(), *spec, f.list_jobs, f.rounds);
    if (child) kill(child, SIGTERM);
    return rc;
  }
  std::vector<SimWorker> workers(f.workers);
  if (!RegisterFleet(f, channels, &workers)) return 1;

  Run run(f, *spec, client.get());
  const absl::Time t0 = absl::Now();
  std::vector<std::thread> threads;
  for (int t = 0; t < f.threads; ++t) {
    threads.emplace_back([&, t] { HeartbeatLoop(run, channels[t], workers, t, t0); });
  }
  if (!CheckOneJob(run, t0)) {
    run.stop = true;
    for (auto& t : threads) t.join();
    if (child) kill(child, SIGTERM);
    return 1;
  }

  const double cpu0 = child ? ProcessCpuSeconds(child) : -1;
  const absl::Time timed_start = absl::Now();
  run.timing = true;
  const absl::Time timed_end = timed_start + absl::Seconds(f.seconds);
  std::vector<std::thread> clients;
  clients.reserve(2 + f.watchers);
  clients.emplace_back([&] { SubmitLoop(run); });
  clients.emplace_back([&] { ListLoop(run); });
  for (int k = 0; k < f.watchers; ++k) clients.emplace_back([&] { WatchLoop(run, timed_end); });

  absl::SleepFor(absl::Seconds(f.seconds));
  const double wall = absl::ToDoubleSeconds(absl::Now() - timed_start);
  const double cpu1 = child ? ProcessCpuSeconds(child) : -1;
  run.stop = true;
  for (auto& t : threads) t.join();
  for (auto& t : clients) t.join();

  const int succeeded = CountSucceeded(client.get());
  if (child) {
    kill(child, SIGTERM);
    waitpid(child, nullptr, 0);
  }
  return PrintResults(run, wall, child != 0, cpu0, cpu1, succeeded);
}
