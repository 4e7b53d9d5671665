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
// Exit status: 0 after a graceful shutdown, 1 if the store or the address
// cannot be used, 2 for a bad command line or config.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/status.h"
#include "config/daemon_config.h"
#include "coordinator/auth_store.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/grpc_service.h"
#include "coordinator/http_pages.h"
#include "coordinator/sqlite_job_store.h"
#include "net/http_server.h"
#include "proto/yoke/v1/config.pb.h"
#include "security/certs.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kDefaultListen[] = "127.0.0.1:7070";
constexpr char kDefaultStore[] = "yoke-coordinator.db";
constexpr int64_t kDefaultDeadlineMs = 10000;

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

absl::Status CheckRoots(const char* field,
                        const google::protobuf::RepeatedPtrField<std::string>& roots) {
  for (int i = 0; i < roots.size(); ++i) {
    if (roots[i].empty() || roots[i][0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "]: must be an absolute directory, got '", roots[i], "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, listen, store_path, log_level, tls_dir, http_listen;
  bool insecure = false;
  absl::Duration deadline = absl::ZeroDuration();
  std::vector<std::string> data_roots, checkpoint_roots;
  yoke::common::FlagParser parser("yoke-coordinator", kUsage);
  parser.String("--config", &config_path)
      .String("--listen", &listen)
      .String("--store", &store_path)
      .Duration("--heartbeat-deadline", &deadline, absl::Nanoseconds(1),
                "a duration > 0 such as 10s")
      .Strings("--data-root", &data_roots)
      .Strings("--checkpoint-root", &checkpoint_roots)
      .String("--log-level", &log_level)
      .String("--tls-dir", &tls_dir)
      .String("--http-listen", &http_listen)
      .Bool("--insecure", &insecure);
  std::vector<std::string> positional;
  if (auto code = parser.ParseOrExitCode(yoke::common::ArgsOf(argc, argv), &positional)) {
    return *code;
  }
  if (!positional.empty()) {
    return parser.UsageError(stderr, absl::StrCat("unexpected argument '", positional[0], "'"));
  }

  yoke::v1::CoordinatorConfig cfg;
  if (!config_path.empty()) {
    if (absl::Status s = yoke::common::LoadDaemonConfig(config_path, &cfg); !s.ok()) {
      return Fail(2, s.ToString());
    }
  }
  if (!listen.empty()) cfg.set_listen(listen);
  if (!http_listen.empty()) cfg.set_http_listen(http_listen);
  if (!store_path.empty()) cfg.set_store_path(store_path);
  if (deadline > absl::ZeroDuration()) {
    cfg.set_heartbeat_deadline_ms(absl::ToInt64Milliseconds(deadline));
  }
  if (!data_roots.empty()) *cfg.mutable_data_roots() = {data_roots.begin(), data_roots.end()};
  if (!checkpoint_roots.empty()) {
    *cfg.mutable_checkpoint_roots() = {checkpoint_roots.begin(), checkpoint_roots.end()};
  }
  if (!log_level.empty()) cfg.set_log_level(log_level);
  if (!tls_dir.empty()) cfg.set_tls_dir(tls_dir);
  if (insecure) cfg.set_insecure(true);
  if (cfg.tls_dir().empty() && !cfg.insecure()) {
    if (const char* env = std::getenv("YOKE_TLS_DIR"); env != nullptr && *env != '\0') {
      cfg.set_tls_dir(env);
    }
  }
  if (cfg.tls_dir().empty() && !cfg.insecure()) {
    return Fail(2,
                "no TLS credentials: pass --tls-dir DIR (ca.crt, tls.crt, tls.key from `yoke "
                "certs issue --role coordinator`), or --insecure for development");
  }
  if (!cfg.tls_dir().empty() && cfg.insecure()) {
    return Fail(2, "--tls-dir and --insecure: choose one");
  }
  if (cfg.listen().empty()) cfg.set_listen(kDefaultListen);
  if (cfg.store_path().empty()) cfg.set_store_path(kDefaultStore);
  if (cfg.heartbeat_deadline_ms() == 0) cfg.set_heartbeat_deadline_ms(kDefaultDeadlineMs);
  if (cfg.log_level().empty()) cfg.set_log_level("info");
  if (cfg.heartbeat_deadline_ms() < 0) {
    return Fail(
        2, absl::StrCat("heartbeat_deadline_ms: must be > 0, got ", cfg.heartbeat_deadline_ms()));
  }
  if (cfg.listen().find(':') == std::string::npos) {
    return Fail(2, absl::StrCat("listen: expected HOST:PORT, got '", cfg.listen(), "'"));
  }
  if (absl::Status s = CheckRoots("data_roots", cfg.data_roots()); !s.ok()) {
    return Fail(2, s.ToString());
  }
  if (absl::Status s = CheckRoots("checkpoint_roots", cfg.checkpoint_roots()); !s.ok()) {
    return Fail(2, s.ToString());
  }
  yoke::common::InitLogging("yoke-coordinator", cfg.log_level());

  // Block the stop signals in every thread (gRPC's included, so set before
  // any starts); one thread takes them synchronously with sigwait.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto store = yoke::server::SqliteJobStore::Open(cfg.store_path());
  if (!store.ok()) return Fail(1, store.status().ToString());
  // Its own file: the job store holds its database exclusively.
  auto auth_store = yoke::server::AuthStore::Open(
      cfg.store_path() == ":memory:" ? cfg.store_path() : cfg.store_path() + ".auth");
  if (!auth_store.ok()) return Fail(1, auth_store.status().ToString());
  yoke::server::ServerOptions server_options;
  server_options.listen = cfg.listen();
  yoke::server::CoordinatorOptions options;
  yoke::server::CoordinatorMetrics metrics;
  options.metrics = &metrics;
  if (cfg.insecure()) {
    spdlog::warn(
        "--insecure: plaintext gRPC, and anyone who reaches {} may submit, cancel, "
        "register as any worker and read any rendezvous key. Development only.",
        cfg.listen());
  } else {
    auto tls = yoke::common::ReadCredentialsDir(cfg.tls_dir(), /*need_leaf=*/true);
    if (!tls.ok()) return Fail(1, absl::StrCat("tls_dir: ", tls.status().message()));
    server_options.tls = std::move(*tls);
    server_options.auth_store = auth_store->get();
    options.workers_authenticated = true;
    options.rendezvous_secret = [a = auth_store->get()](const std::string& job, int attempt) {
      return a->RendezvousSecret(job, attempt);
    };
  }
  // Worker ids and their incarnation tokens outlive a restart, with TLS or
  // without.
  yoke::server::UseAuthStoreForWorkerIds(auth_store->get(), &options);
  options.heartbeat_deadline = absl::Milliseconds(cfg.heartbeat_deadline_ms());
  options.data_roots.assign(cfg.data_roots().begin(), cfg.data_roots().end());
  options.checkpoint_roots.assign(cfg.checkpoint_roots().begin(), cfg.checkpoint_roots().end());
  auto coordinator =
      yoke::server::Coordinator::Create(store->get(), yoke::common::RealClock::Get(), options);
  if (!coordinator.ok()) return Fail(1, coordinator.status().ToString());
  auto server = yoke::server::CoordinatorServer::Start(coordinator->get(), server_options);
  if (!server.ok()) return Fail(1, server.status().ToString());

  // /metrics and the dashboard. A port given explicitly must be served; the
  // default one is skipped with a warning when taken.
  std::unique_ptr<yoke::common::HttpServer> http;
  if (cfg.http_listen() != "off") {
    const bool explicit_port = !cfg.http_listen().empty();
    const std::string http_address =
        explicit_port ? cfg.http_listen() : yoke::server::DefaultHttpListen((*server)->address());
    yoke::server::HttpPagesOptions pages;
    pages.coordinator = coordinator->get();
    pages.metrics = &metrics;
    pages.auth = cfg.insecure() ? nullptr : auth_store->get();
    auto h =
        yoke::common::HttpServer::Start(http_address, yoke::server::CoordinatorHttpRoutes(pages));
    if (!h.ok() && explicit_port)
      return Fail(1, absl::StrCat("http_listen: ", h.status().message()));
    if (!h.ok()) {
      spdlog::warn("no /metrics or dashboard: {} (set --http-listen)",
                   std::string(h.status().message()));
    } else {
      http = std::move(*h);
      std::printf("yoke-coordinator http on %s\n", http->address().c_str());
      spdlog::info("metrics and dashboard on http://{}/ ({})", http->address(),
                   cfg.insecure() ? "no authentication" : "bearer tokens");
    }
  }

  std::printf("yoke-coordinator listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  spdlog::info(
      "serving on {} ({}, store {}, heartbeat deadline {} ms, {} data roots, {} "
      "checkpoint roots)",
      (*server)->address(), cfg.insecure() ? "INSECURE" : "mutual TLS", cfg.store_path(),
      cfg.heartbeat_deadline_ms(), cfg.data_roots_size(), cfg.checkpoint_roots_size());

  std::thread signals([&] {
    int sig = 0;
    if (sigwait(&stop_signals, &sig) != 0) return;
    spdlog::info("received {}; shutting down", strsignal(sig));
    std::thread([&] {
      int again = 0;
      if (sigwait(&stop_signals, &again) == 0) {
        spdlog::warn("received {} again; exiting now", strsignal(again));
        std::_Exit(128 + again);
      }
    }).detach();
    (*server)->Shutdown();
  });
  (*server)->Wait();
  signals.join();
  http.reset();
  server->reset();
  coordinator->reset();  // flushes progress
  store->reset();
  auth_store->reset();
  spdlog::info("stopped");
  return 0;
}
