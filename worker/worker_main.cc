// yoke-worker: the worker daemon. It discovers this machine's devices,
// registers with the coordinator, heartbeats, and runs each attempt it is
// given as a `yoke-trainer` child process (worker/daemon.h has the protocol).
//
//   yoke-worker [--config FILE] [--coordinator HOST:PORT] [--cpu-replicas N]
//               [--work-dir DIR] [--trainer PATH] [--stop-grace DURATION]
//               [--heartbeat-interval DURATION] [--log-level LEVEL] [--no-cuda]
//               [--advertise-address ADDR] [--data-ports FIRST-LAST]
//               [--metrics-listen HOST:PORT] (--tls-dir DIR | --insecure)
//
// TLS is required: --tls-dir (or tls_dir in the config, or $YOKE_TLS_DIR)
// holds ca.crt, tls.crt and tls.key from `yoke certs issue --role worker
// --name ID`; the worker registers as ID, the name its certificate binds it
// to. Its trainers get the CA (YOKE_TLS_CA) and their attempt's rendezvous
// secret (YOKE_RENDEZVOUS_SECRET) in their environment. --insecure talks
// plaintext to an --insecure coordinator: development only.
//
// The config file is a yoke.v1.WorkerConfig in YAML; flags override it, and
// the environment variable YOKE_ADVERTISE_ADDRESS overrides the file's
// advertise_address (the flag overrides both). Without any, the worker
// advertises the local address of its route to the coordinator
// (worker/address.h); a loopback address is refused when the coordinator is
// not on loopback. --data-ports (or data_ports, or $YOKE_DATA_PORTS) keeps
// the trainers' Gloo listeners in a port range (collective/listen_ports.h).
// --metrics-listen (or metrics_listen) serves this worker's trainers'
// figures at /metrics (worker/worker_metrics.h; off by default); the bound
// address is printed as "yoke-worker metrics on HOST:PORT".
// Durations are "10s", "500ms" or plain milliseconds. Once registered it
// prints "yoke-worker <id> registered with <address>" on stdout (scripts wait
// for that line); logs go to stderr. SIGTERM or SIGINT shut it down
// gracefully (trainers are stopped with the grace period, the coordinator is
// told, exit 0); a second signal exits at once, killing the trainers.
// Exit status: 0 after a graceful shutdown, 2 for a bad command line or
// config.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/port_range.h"
#include "common/self_dir.h"
#include "common/status.h"
#include "config/daemon_config.h"
#include "net/http_server.h"
#include "proto/yoke/v1/config.pb.h"
#include "security/certs.h"
#include "security/tls_credentials.h"
#include "worker/address.h"
#include "worker/daemon.h"
#include "worker/devices.h"
#include "worker/worker_metrics.h"

namespace {

constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";

constexpr char kUsage[] =
    "usage: yoke-worker [--config FILE] [--coordinator HOST:PORT] [--cpu-replicas N]\n"
    "                   [--work-dir DIR] [--trainer PATH] [--stop-grace DURATION]\n"
    "                   [--heartbeat-interval DURATION] [--log-level LEVEL] [--no-cuda]\n"
    "                   [--advertise-address ADDR] [--data-ports FIRST-LAST]\n"
    "                   [--metrics-listen HOST:PORT] (--tls-dir DIR | --insecure)\n"
    "  --advertise-address: where the other workers reach this one's trainers\n"
    "  (default: $YOKE_ADVERTISE_ADDRESS, else the address of the route to the coordinator)\n"
    "  --data-ports: the ports those trainers listen on (default: $YOKE_DATA_PORTS, else any)\n"
    "  --metrics-listen: serve Prometheus /metrics there (default: off)\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "yoke-worker: %s\n", message.c_str());
  return 2;
}

// Turns SIGTERM/SIGINT into a graceful shutdown. The signals are blocked in
// every thread (set before any thread starts) and taken here synchronously,
// so no async-signal-safety rules apply.
void WaitForSignals(sigset_t set, yoke::worker::WorkerDaemon* daemon) {
  int sig = 0;
  if (sigwait(&set, &sig) != 0) return;
  spdlog::info("received {}; stopping trainers and shutting down", strsignal(sig));
  daemon->Shutdown();
  if (sigwait(&set, &sig) != 0) return;
  spdlog::warn("received {} again; exiting now", strsignal(sig));
  // Trainers die with the daemon (PR_SET_PDEATHSIG).
  std::_Exit(128 + sig);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path, coordinator, work_dir, trainer, log_level, advertise, tls_dir,
      data_ports, metrics_listen;
  int cpu_replicas = -1;
  bool no_cuda = false, insecure = false;
  absl::Duration stop_grace = absl::InfiniteDuration();
  absl::Duration heartbeat = absl::InfiniteDuration();
  yoke::common::FlagParser parser("yoke-worker", kUsage);
  parser.String("--config", &config_path)
      .String("--coordinator", &coordinator)
      .Int("--cpu-replicas", &cpu_replicas, 0, 1024)
      .String("--work-dir", &work_dir)
      .String("--trainer", &trainer)
      .Duration("--stop-grace", &stop_grace, absl::ZeroDuration(), "a duration like 10s")
      .Duration("--heartbeat-interval", &heartbeat, absl::Nanoseconds(1),
                "a positive duration like 1s")
      .String("--log-level", &log_level)
      .String("--advertise-address", &advertise)
      .String("--data-ports", &data_ports)
      .String("--metrics-listen", &metrics_listen)
      .Bool("--no-cuda", &no_cuda)
      .String("--tls-dir", &tls_dir)
      .Bool("--insecure", &insecure);
  std::vector<std::string> positional;
  if (auto code = parser.ParseOrExitCode(yoke::common::ArgsOf(argc, argv), &positional)) {
    return *code;
  }
  if (!positional.empty()) {
    return parser.UsageError(stderr, absl::StrCat("unexpected argument '", positional[0], "'"));
  }

  yoke::v1::WorkerConfig cfg;
  if (!config_path.empty()) {
    absl::Status s = yoke::common::LoadDaemonConfig(config_path, &cfg);
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  if (!coordinator.empty()) cfg.set_coordinator(coordinator);
  if (cpu_replicas >= 0) cfg.set_cpu_replicas(cpu_replicas);
  if (!work_dir.empty()) cfg.set_work_dir(work_dir);
  if (!trainer.empty()) cfg.set_trainer_path(trainer);
  if (!log_level.empty()) cfg.set_log_level(log_level);
  if (const char* env = std::getenv("YOKE_ADVERTISE_ADDRESS"); env != nullptr && *env != '\0') {
    cfg.set_advertise_address(env);
  }
  if (!advertise.empty()) cfg.set_advertise_address(advertise);
  if (const char* env = std::getenv("YOKE_DATA_PORTS"); env != nullptr && *env != '\0') {
    cfg.set_data_ports(env);
  }
  if (!data_ports.empty()) cfg.set_data_ports(data_ports);
  if (!metrics_listen.empty()) cfg.set_metrics_listen(metrics_listen);
  if (stop_grace != absl::InfiniteDuration()) {
    cfg.set_stop_grace_ms(absl::ToInt64Milliseconds(stop_grace));
  }
  if (heartbeat != absl::InfiniteDuration()) {
    cfg.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(heartbeat));
  }
  // Defaults (proto3 cannot tell unset from zero; a flag can still set 0
  // CPU replicas for a GPU-only worker).
  if (cfg.coordinator().empty()) cfg.set_coordinator(kDefaultCoordinator);
  if (cfg.cpu_replicas() == 0 && cpu_replicas != 0) cfg.set_cpu_replicas(1);
  if (cfg.work_dir().empty()) cfg.set_work_dir("yoke-work");
  if (cfg.trainer_path().empty()) cfg.set_trainer_path(yoke::common::SelfDir() + "/yoke-trainer");
  if (cfg.log_level().empty()) cfg.set_log_level("info");
  if (cfg.heartbeat_interval_ms() <= 0) cfg.set_heartbeat_interval_ms(1000);
  if (cfg.stop_grace_ms() <= 0 && stop_grace == absl::InfiniteDuration()) {
    cfg.set_stop_grace_ms(10000);
  }
  if (!tls_dir.empty()) cfg.set_tls_dir(tls_dir);
  if (insecure) cfg.set_insecure(true);
  if (cfg.tls_dir().empty() && !cfg.insecure()) {
    if (const char* env = std::getenv("YOKE_TLS_DIR"); env != nullptr && *env != '\0') {
      cfg.set_tls_dir(env);
    }
  }
  if (cfg.tls_dir().empty() && !cfg.insecure()) {
    return Fail(
        "no TLS credentials: pass --tls-dir DIR (ca.crt, tls.crt, tls.key from `yoke "
        "certs issue --role worker --name ID`), or --insecure for development");
  }
  if (!cfg.tls_dir().empty() && cfg.insecure()) return Fail("--tls-dir and --insecure: choose one");
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  std::string tls_ca_path;
  if (!cfg.tls_dir().empty()) {
    auto tls = yoke::common::ReadCredentialsDir(cfg.tls_dir(), /*need_leaf=*/true);
    if (!tls.ok()) return Fail(absl::StrCat("tls_dir: ", tls.status().message()));
    credentials = yoke::common::TlsChannelCredentials(*tls);
    std::error_code abs_ec;
    tls_ca_path = std::filesystem::absolute(cfg.tls_dir() + "/ca.crt", abs_ec).string();
  }
  if (cfg.cpu_replicas() < 0) {
    return Fail(absl::StrCat("cpu_replicas: must be >= 0, got ", cfg.cpu_replicas()));
  }
  if (::access(cfg.trainer_path().c_str(), X_OK) != 0) {
    return Fail(
        absl::StrCat("trainer_path: cannot execute ", cfg.trainer_path(), " (set --trainer)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(cfg.work_dir(), ec);
  if (ec) return Fail(absl::StrCat("work_dir: cannot create ", cfg.work_dir(), ": ", ec.message()));
  std::string abs_work_dir = std::filesystem::absolute(cfg.work_dir(), ec).string();

  // Block the shutdown signals before any thread exists (gRPC starts some),
  // so only the signal thread ever takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  yoke::common::InitLogging("yoke-worker", cfg.log_level());

  yoke::worker::DeviceOptions dev_opts;
  dev_opts.cpu_replicas = cfg.cpu_replicas();
  dev_opts.discover_cuda = !no_cuda;
  yoke::worker::DeviceInventory inv = yoke::worker::DiscoverDevices(dev_opts);
  spdlog::info("devices: {} cpu replicas; {}", yoke::worker::CountDevices(inv.devices, "cpu"),
               inv.cuda_note);
  if (inv.devices.empty()) return Fail("no devices: set --cpu-replicas or install a GPU driver");

  absl::StatusOr<std::string> advertised =
      yoke::worker::ResolveAdvertiseAddress(cfg.advertise_address(), cfg.coordinator());
  if (!advertised.ok()) return Fail(std::string(advertised.status().message()));

  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);

  yoke::worker::WorkerDaemonOptions opts;
  opts.hostname = host;
  opts.devices = inv.devices;
  opts.coordinator_address = cfg.coordinator();
  opts.advertise_address = *advertised;
  opts.work_dir = abs_work_dir;
  opts.trainer_path = cfg.trainer_path();
  opts.trainer_args = {"--log-level", cfg.log_level() == "debug" ? "debug" : "info"};
  if (!cfg.data_ports().empty()) {
    absl::StatusOr<yoke::common::PortRange> range = yoke::common::ParsePortRange(cfg.data_ports());
    if (!range.ok()) return Fail(std::string(range.status().message()));
    opts.trainer_args.insert(opts.trainer_args.end(), {"--data-ports", range->ToString()});
  }
  opts.heartbeat_interval = absl::Milliseconds(cfg.heartbeat_interval_ms());
  opts.stop_grace = absl::Milliseconds(cfg.stop_grace_ms());
  opts.tls_ca_path = tls_ca_path;
  if (cfg.insecure()) {
    spdlog::warn(
        "--insecure: plaintext to {}, and the coordinator cannot tell this worker from "
        "any other client. Development only.",
        cfg.coordinator());
  }

  yoke::worker::WorkerMetrics metrics;
  std::unique_ptr<yoke::common::HttpServer> http;
  if (!cfg.metrics_listen().empty() && cfg.metrics_listen() != "off") {
    std::vector<std::pair<std::string, yoke::common::HttpHandler>> routes;
    routes.push_back(
        {"/metrics", [&metrics](const yoke::common::HttpRequest&) {
           return yoke::common::HttpResponse{
               200, "text/plain; version=0.0.4; charset=utf-8", metrics.Exposition(), {}};
         }});
    auto h = yoke::common::HttpServer::Start(cfg.metrics_listen(), std::move(routes));
    if (!h.ok()) return Fail(absl::StrCat("metrics_listen: ", h.status().message()));
    http = std::move(*h);
    opts.metrics = &metrics;
    std::printf("yoke-worker metrics on %s\n", http->address().c_str());
    std::fflush(stdout);
  }

  std::unique_ptr<yoke::worker::CoordinatorClient> client =
      yoke::worker::NewGrpcCoordinatorClient(cfg.coordinator(), credentials);
  yoke::worker::WorkerDaemon daemon(opts, client.get());
  daemon.on_registered = [&](const std::string& id, bool first) {
    if (!first) return;
    std::printf("yoke-worker %s registered with %s\n", id.c_str(), cfg.coordinator().c_str());
    std::fflush(stdout);
  };
  std::thread(WaitForSignals, signals, &daemon).detach();
  spdlog::info("yoke-worker on {} (advertising {}): coordinator {}, work dir {}, trainer {}", host,
               *advertised, cfg.coordinator(), abs_work_dir, cfg.trainer_path());
  absl::Status s = daemon.Run();
  return s.ok() ? 0 : 1;
}
