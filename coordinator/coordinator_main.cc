// yoke-coordinator: the control-plane daemon. It serves yoke.v1.Coordinator
// (clients), yoke.v1.WorkerControl (worker daemons) and yoke.v1.Rendezvous
// (trainers) with gRPC health checking and reflection, and keeps its jobs in
// a SQLite store.
//
//   yoke-coordinator [--config FILE] [--listen HOST:PORT] [--store PATH]
//                    [--heartbeat-deadline DURATION] [--data-root DIR ...]
//                    [--checkpoint-root DIR ...] [--log-level LEVEL]
//                    [--http-listen HOST:PORT|off] (--tls-dir DIR | --insecure)
//
// TLS is required: --tls-dir (or tls_dir in the config, or $YOKE_TLS_DIR)
// names a directory with ca.crt, tls.crt and tls.key (`yoke certs issue
// --role coordinator`), and every caller must present a certificate from
// that CA or a bearer token (coordinator/auth.h). --insecure serves plaintext to
// anyone, as an admin: for development only, and logged as a warning.
//
// The config file is a yoke.v1.CoordinatorConfig in YAML (strict: unknown
// keys are errors); flags override it, and --data-root / --checkpoint-root,
// when given, replace the file's lists. Defaults: --listen 127.0.0.1:7070
// (loopback only until an operator opens it up), --store
// yoke-coordinator.db, --heartbeat-deadline 10s. Durations are "10s",
// "500ms" or plain milliseconds.
//
// --http-listen (default: 127.0.0.1, the gRPC port + 1, or a free port when
// that is 0) serves /metrics and the dashboard (coordinator/http_pages.h), behind
// the same bearer tokens as the API; "off" turns it off. Its bound address
// is printed as "yoke-coordinator http on HOST:PORT" before the line below.
// Once serving it prints "yoke-coordinator listening on HOST:PORT" on stdout,
// with the port actually bound (so --listen 127.0.0.1:0 works); `yoke up`
// and the tests wait for that line. Logs go to stderr. SIGTERM or SIGINT
// shut it down gracefully: calls in flight finish (streams end), progress
// is flushed to the store, exit 0. A second signal exits at once; nothing is
// lost that way either, since state changes are already in the store.
//
// Port 0 is kept across restarts (coordinator/recorded_port.h): started with
// --listen HOST:0 and a store file, the coordinator records the port it
// bound in <store>.port, and started again the same way it listens on that
// port again, so that a supervisor may restart it with its own command line
// and its workers find it. If that port has been taken meanwhile, it warns,
// naming the port, and listens on a fresh one (recorded in turn). An
// explicit port is never overridden.
// Exit status: 0 after a graceful shutdown, 1 if the store or the address
// cannot be used, 2 for a bad command line or config.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/logging.h"
#include "coordinator/auth_store.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/grpc_service.h"
#include "coordinator/http_pages.h"
#include "coordinator/main_options.h"
#include "coordinator/recorded_port.h"
#include "coordinator/sqlite_job_store.h"
#include "net/http_server.h"
#include "proto/yoke/v1/config.pb.h"
#include "security/certs.h"
#include "spdlog/spdlog.h"

namespace {

using yoke::server::CoordinatorServer;

constexpr char kUsage[] =
    "usage: yoke-coordinator [--config FILE] [--listen HOST:PORT] [--store PATH]\n"
    "                        [--heartbeat-deadline DURATION] [--data-root DIR ...]\n"
    "                        [--checkpoint-root DIR ...] [--log-level LEVEL]\n"
    "                        [--http-listen HOST:PORT|off] (--tls-dir DIR | --insecure)\n"
    "  --http-listen: /metrics and the dashboard (default 127.0.0.1 and the gRPC port + 1)\n";

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "yoke-coordinator: %s\n", message.c_str());
  return code;
}

// Starts serving on the port the last run recorded when asked for port 0
// (coordinator/recorded_port.h), else, or when that port is taken, as
// configured; records the port bound when asked for port 0.
absl::StatusOr<std::unique_ptr<CoordinatorServer>> StartServer(
    yoke::server::Coordinator* coordinator, const yoke::server::ServerOptions& options,
    const std::string& store_path) {
  if (std::optional<std::string> recorded =
          yoke::server::RecordedListen(options.listen, store_path)) {
    yoke::server::ServerOptions again = options;
    again.listen = *recorded;
    auto server = CoordinatorServer::Start(coordinator, again);
    if (server.ok()) return server;
    spdlog::warn(
        "cannot listen on {} again, the address the last run recorded in {} ({}); listening on a "
        "fresh port instead: workers and clients of the last run must be given the new address",
        *recorded, yoke::server::RecordedPortPath(store_path),
        std::string(server.status().message()));
  }
  auto server = CoordinatorServer::Start(coordinator, options);
  if (server.ok() && yoke::server::KeepsItsPort(options.listen, store_path)) {
    if (absl::Status s = yoke::server::RecordPort(store_path, (*server)->port()); !s.ok()) {
      spdlog::warn("a restart on port 0 will pick a new port: {}", std::string(s.message()));
    }
  }
  return server;
}

// /metrics and the dashboard: nullptr when turned off, or when the default
// port is taken (a warning); an error when an explicit one cannot be served.
absl::StatusOr<std::unique_ptr<yoke::common::HttpServer>> StartHttp(
    const yoke::v1::CoordinatorConfig& cfg, const std::string& grpc_address,
    const yoke::server::HttpPagesOptions& pages) {
  if (cfg.http_listen() == "off") return nullptr;
  const bool explicit_port = !cfg.http_listen().empty();
  const std::string http_address =
      explicit_port ? cfg.http_listen() : yoke::server::DefaultHttpListen(grpc_address);
  auto h =
      yoke::common::HttpServer::Start(http_address, yoke::server::CoordinatorHttpRoutes(pages));
  if (!h.ok() && explicit_port) {
    return absl::UnavailableError(absl::StrCat("http_listen: ", h.status().message()));
  }
  if (!h.ok()) {
    spdlog::warn("no /metrics or dashboard: {} (set --http-listen)",
                 std::string(h.status().message()));
    return nullptr;
  }
  std::printf("yoke-coordinator http on %s\n", (*h)->address().c_str());
  spdlog::info("metrics and dashboard on http://{}/ ({})", (*h)->address(),
               cfg.insecure() ? "no authentication" : "bearer tokens");
  return h;
}

// Takes the stop signals (blocked in every thread) synchronously: the first
// shuts `server` down gracefully, a second exits at once.
void ShutDownOnSignal(sigset_t stop_signals, CoordinatorServer* server) {
  int sig = 0;
  if (sigwait(&stop_signals, &sig) != 0) return;
  spdlog::info("received {}; shutting down", strsignal(sig));
  std::thread([stop_signals] {
    int again = 0;
    if (sigwait(&stop_signals, &again) == 0) {
      spdlog::warn("received {} again; exiting now", strsignal(again));
      std::_Exit(128 + again);
    }
  }).detach();
  server->Shutdown();
}

// What the daemon runs, built by Start and torn down by Stop in the order
// that flushes everything (the HTTP pages and the server first, the
// coordinator's progress into the store next).
struct Daemon {
  std::unique_ptr<yoke::server::SqliteJobStore> store;
  std::unique_ptr<yoke::server::AuthStore> auth_store;
  yoke::server::CoordinatorMetrics metrics;
  std::unique_ptr<yoke::server::Coordinator> coordinator;
  std::unique_ptr<CoordinatorServer> server;
  std::unique_ptr<yoke::common::HttpServer> http;

  void Stop() {
    http.reset();
    server.reset();
    coordinator.reset();  // flushes progress
    store.reset();
    auth_store.reset();
  }
};

// Opens the stores and starts the coordinator, its gRPC server and its HTTP
// pages as `cfg` says. Returns nullopt when serving, else the exit code
// (after printing why).
std::optional<int> Start(const yoke::v1::CoordinatorConfig& cfg, Daemon* d) {
  auto store = yoke::server::SqliteJobStore::Open(cfg.store_path());
  if (!store.ok()) return Fail(1, store.status().ToString());
  d->store = *std::move(store);
  // Its own file: the job store holds its database exclusively.
  auto auth_store = yoke::server::AuthStore::Open(
      cfg.store_path() == ":memory:" ? cfg.store_path() : cfg.store_path() + ".auth");
  if (!auth_store.ok()) return Fail(1, auth_store.status().ToString());
  d->auth_store = *std::move(auth_store);
  yoke::server::ServerOptions server_options;
  server_options.listen = cfg.listen();
  yoke::server::CoordinatorOptions options;
  options.metrics = &d->metrics;
  if (cfg.insecure()) {
    spdlog::warn(
        "--insecure: plaintext gRPC, and anyone who reaches {} may submit, cancel, "
        "register as any worker and read any rendezvous key. Development only.",
        cfg.listen());
  } else {
    auto tls = yoke::common::ReadCredentialsDir(cfg.tls_dir(), /*need_leaf=*/true);
    if (!tls.ok()) return Fail(1, absl::StrCat("tls_dir: ", tls.status().message()));
    server_options.tls = std::move(*tls);
    server_options.auth_store = d->auth_store.get();
    options.workers_authenticated = true;
    options.rendezvous_secret = [a = d->auth_store.get()](const std::string& job, int attempt) {
      return a->RendezvousSecret(job, attempt);
    };
  }
  // Worker ids and their incarnation tokens outlive a restart, with TLS or
  // without.
  yoke::server::UseAuthStoreForWorkerIds(d->auth_store.get(), &options);
  options.heartbeat_deadline = absl::Milliseconds(cfg.heartbeat_deadline_ms());
  options.data_roots.assign(cfg.data_roots().begin(), cfg.data_roots().end());
  options.checkpoint_roots.assign(cfg.checkpoint_roots().begin(), cfg.checkpoint_roots().end());
  // -1 in the config is "no limit", 0 in the options.
  options.max_pending_jobs_per_submitter =
      std::max<int64_t>(0, cfg.max_pending_jobs_per_submitter());
  options.max_pending_spec_bytes_per_submitter =
      std::max<int64_t>(0, cfg.max_pending_spec_bytes_per_submitter());
  options.max_submits_per_minute_per_submitter =
      std::max<int64_t>(0, cfg.max_submits_per_minute_per_submitter());
  options.max_running_devices_per_submitter = cfg.max_running_devices_per_submitter();
  options.default_max_run_seconds = cfg.default_max_run_seconds();
  auto coordinator =
      yoke::server::Coordinator::Create(d->store.get(), yoke::common::RealClock::Get(), options);
  if (!coordinator.ok()) return Fail(1, coordinator.status().ToString());
  d->coordinator = *std::move(coordinator);
  auto server = StartServer(d->coordinator.get(), server_options, cfg.store_path());
  if (!server.ok()) return Fail(1, server.status().ToString());
  d->server = *std::move(server);

  yoke::server::HttpPagesOptions pages;
  pages.coordinator = d->coordinator.get();
  pages.metrics = &d->metrics;
  pages.auth = cfg.insecure() ? nullptr : d->auth_store.get();
  auto http = StartHttp(cfg, d->server->address(), pages);
  if (!http.ok()) return Fail(1, std::string(http.status().message()));
  d->http = *std::move(http);
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  yoke::common::FlagParser parser("yoke-coordinator", kUsage);
  yoke::server::CoordinatorFlags flags(&parser);
  std::vector<std::string> positional;
  if (auto code = parser.ParseOrExitCode(yoke::common::ArgsOf(argc, argv), &positional)) {
    return *code;
  }
  if (!positional.empty()) {
    return parser.UsageError(stderr, absl::StrCat("unexpected argument '", positional[0], "'"));
  }
  absl::StatusOr<yoke::v1::CoordinatorConfig> built = yoke::server::BuildCoordinatorConfig(flags);
  if (!built.ok()) return Fail(2, std::string(built.status().message()));
  const yoke::v1::CoordinatorConfig& cfg = *built;
  yoke::common::InitLogging("yoke-coordinator", cfg.log_level());

  // Block the stop signals in every thread (gRPC's included, so set before
  // any starts); one thread takes them synchronously with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Daemon d;
  if (std::optional<int> code = Start(cfg, &d)) return *code;
  std::printf("yoke-coordinator listening on %s\n", d.server->address().c_str());
  std::fflush(stdout);
  spdlog::info(
      "serving on {} ({}, store {}, heartbeat deadline {} ms, {} data roots, {} "
      "checkpoint roots)",
      d.server->address(), cfg.insecure() ? "INSECURE" : "mutual TLS", cfg.store_path(),
      cfg.heartbeat_deadline_ms(), cfg.data_roots_size(), cfg.checkpoint_roots_size());

  std::thread signals(ShutDownOnSignal, stop_signals, d.server.get());
  d.server->Wait();
  signals.join();
  d.Stop();
  spdlog::info("stopped");
  return 0;
}
