// yoke-worker: the worker daemon. It discovers this machine's devices,
// registers with the coordinator, heartbeats, and runs each attempt it is
// given as a `yoke-trainer` child process (worker/daemon.h has the protocol).
//
//   yoke-worker [--config FILE] [--coordinator HOST:PORT] [--cpu-replicas N]
//               [--work-dir DIR] [--trainer PATH] [--stop-grace DURATION]
//               [--heartbeat-interval DURATION] [--log-level LEVEL] [--no-cuda]
//               [--advertise-address ADDR] [--data-ports FIRST-LAST]
//               [--metrics-listen HOST:PORT] [--memory-limit SIZE]
//               (--tls-dir DIR | --insecure)
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
// --memory-limit (or memory_limit_bytes) is the memory all its trainers may
// use, "48GiB" or bytes (default: the machine's, less a reserve); each
// replica's share is that over its replicas, and each trainer runs in a
// memory cgroup holding it to the shares of its ranks
// (worker/memory_cgroup.h). Without a usable memory controller it warns once
// and runs trainers unlimited.
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
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/port_range.h"
#include "jobspec/memory_estimate.h"
#include "net/http_server.h"
#include "security/tls_credentials.h"
#include "worker/address.h"
#include "worker/daemon.h"
#include "worker/devices.h"
#include "worker/main_options.h"
#include "worker/memory_cgroup.h"
#include "worker/worker_metrics.h"

namespace {

constexpr char kUsage[] =
    "usage: yoke-worker [--config FILE] [--coordinator HOST:PORT] [--cpu-replicas N]\n"
    "                   [--work-dir DIR] [--trainer PATH] [--stop-grace DURATION]\n"
    "                   [--heartbeat-interval DURATION] [--log-level LEVEL] [--no-cuda]\n"
    "                   [--advertise-address ADDR] [--data-ports FIRST-LAST]\n"
    "                   [--metrics-listen HOST:PORT] [--memory-limit SIZE]\n"
    "                   (--tls-dir DIR | --insecure)\n"
    "  --advertise-address: where the other workers reach this one's trainers\n"
    "  (default: $YOKE_ADVERTISE_ADDRESS, else the address of the route to the coordinator)\n"
    "  --data-ports: the ports those trainers listen on (default: $YOKE_DATA_PORTS, else any)\n"
    "  --metrics-listen: serve Prometheus /metrics there (default: off)\n"
    "  --memory-limit: memory for all trainers, e.g. 48GiB, split over the replicas and\n"
    "  enforced per trainer with a memory cgroup (default: the machine's less a reserve)\n";

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

// The daemon's options from the worker's: this machine's devices, the
// address it advertises and the trainers' arguments. Fails with the message
// to print (exit 2).
absl::StatusOr<yoke::worker::WorkerDaemonOptions> DaemonOptions(
    const yoke::worker::WorkerMainOptions& o) {
  const yoke::v1::WorkerConfig& cfg = o.config;
  yoke::worker::DeviceOptions dev_opts;
  dev_opts.cpu_replicas = cfg.cpu_replicas();
  dev_opts.discover_cuda = o.discover_cuda;
  dev_opts.memory_limit_bytes = cfg.memory_limit_bytes();
  yoke::worker::DeviceInventory inv = yoke::worker::DiscoverDevices(dev_opts);
  spdlog::info("devices: {} cpu replicas; {}", yoke::worker::CountDevices(inv.devices, "cpu"),
               inv.cuda_note);
  if (inv.devices.empty()) {
    return absl::InvalidArgumentError("no devices: set --cpu-replicas or install a GPU driver");
  }
  absl::StatusOr<std::string> advertised =
      yoke::worker::ResolveAdvertiseAddress(cfg.advertise_address(), cfg.coordinator());
  if (!advertised.ok()) return advertised.status();

  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  yoke::worker::WorkerDaemonOptions opts;
  opts.hostname = host;
  opts.devices = inv.devices;
  opts.coordinator_address = cfg.coordinator();
  opts.advertise_address = *advertised;
  opts.work_dir = o.work_dir;
  opts.trainer_path = cfg.trainer_path();
  opts.trainer_args = {"--log-level", cfg.log_level() == "debug" ? "debug" : "info"};
  if (!cfg.data_ports().empty()) {
    absl::StatusOr<yoke::common::PortRange> range = yoke::common::ParsePortRange(cfg.data_ports());
    if (!range.ok()) return range.status();
    opts.trainer_args.insert(opts.trainer_args.end(), {"--data-ports", range->ToString()});
  }
  opts.heartbeat_interval = absl::Milliseconds(cfg.heartbeat_interval_ms());
  opts.stop_grace = absl::Milliseconds(cfg.stop_grace_ms());
  opts.tls_ca_path = o.tls_ca_path;
  opts.replica_memory_bytes = inv.replica_memory_bytes;
  return opts;
}

// The memory cgroups trainers run in, or null, with the one warning that
// says so when the machine offers none this worker can use.
std::unique_ptr<yoke::worker::MemoryCgroups> OpenMemoryCgroups(const yoke::v1::WorkerConfig& cfg,
                                                               int64_t share) {
  using yoke::common::FormatBytes;
  const int64_t limit = cfg.memory_limit_bytes();
  const int64_t visible = yoke::worker::VisibleMemoryBytes();
  if (visible > 0 && limit > visible) {
    spdlog::warn("--memory-limit {} is more than the {} this machine gives the worker",
                 FormatBytes(limit), FormatBytes(visible));
  }
  auto cgroups = yoke::worker::MemoryCgroups::Open();
  if (!cgroups.ok()) {
    spdlog::warn(
        "trainers run WITHOUT a memory limit: {}. A trainer can take all of this machine's "
        "memory; its replicas still report {} each, which the coordinator checks jobs against",
        std::string(cgroups.status().message()), FormatBytes(share));
    return nullptr;
  }
  spdlog::info("memory: {} for trainers, {} per replica, each trainer in its own cgroup ({})",
               FormatBytes(limit), FormatBytes(share), (*cgroups)->Describe());
  if ((*cgroups)->stale_removed() > 0) {
    spdlog::info("removed {} empty trainer cgroups left by a worker that is gone",
                 (*cgroups)->stale_removed());
  }
  return *std::move(cgroups);
}

// Serves `metrics` at /metrics on `listen` and prints the bound address.
absl::StatusOr<std::unique_ptr<yoke::common::HttpServer>> ServeMetrics(
    const std::string& listen, yoke::worker::WorkerMetrics* metrics) {
  std::vector<std::pair<std::string, yoke::common::HttpHandler>> routes;
  routes.push_back(
      {"/metrics", [metrics](const yoke::common::HttpRequest&) {
         return yoke::common::HttpResponse{
             200, "text/plain; version=0.0.4; charset=utf-8", metrics->Exposition(), {}};
       }});
  auto h = yoke::common::HttpServer::Start(listen, std::move(routes));
  if (!h.ok())
    return absl::InvalidArgumentError(absl::StrCat("metrics_listen: ", h.status().message()));
  std::printf("yoke-worker metrics on %s\n", (*h)->address().c_str());
  std::fflush(stdout);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  yoke::common::FlagParser parser("yoke-worker", kUsage);
  yoke::worker::WorkerFlags flags(&parser);
  std::vector<std::string> positional;
  if (auto code = parser.ParseOrExitCode(yoke::common::ArgsOf(argc, argv), &positional)) {
    return *code;
  }
  if (!positional.empty()) {
    return parser.UsageError(stderr, absl::StrCat("unexpected argument '", positional[0], "'"));
  }
  absl::StatusOr<yoke::worker::WorkerMainOptions> o = yoke::worker::BuildWorkerOptions(flags);
  if (!o.ok()) return Fail(std::string(o.status().message()));
  const yoke::v1::WorkerConfig& cfg = o->config;

  // Block the shutdown signals before any thread exists (gRPC starts some),
  // so only the signal thread ever takes them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  yoke::common::InitLogging("yoke-worker", cfg.log_level());
  absl::StatusOr<yoke::worker::WorkerDaemonOptions> opts = DaemonOptions(*o);
  if (!opts.ok()) return Fail(std::string(opts.status().message()));
  std::unique_ptr<yoke::worker::MemoryCgroups> cgroups =
      OpenMemoryCgroups(cfg, opts->replica_memory_bytes);
  opts->memory_cgroups = cgroups.get();
  if (cfg.insecure()) {
    spdlog::warn(
        "--insecure: plaintext to {}, and the coordinator cannot tell this worker from "
        "any other client. Development only.",
        cfg.coordinator());
  }

  yoke::worker::WorkerMetrics metrics;
  std::unique_ptr<yoke::common::HttpServer> http;
  if (!cfg.metrics_listen().empty() && cfg.metrics_listen() != "off") {
    auto h = ServeMetrics(cfg.metrics_listen(), &metrics);
    if (!h.ok()) return Fail(std::string(h.status().message()));
    http = *std::move(h);
    opts->metrics = &metrics;
  }

  std::unique_ptr<yoke::worker::CoordinatorClient> client = yoke::worker::NewGrpcCoordinatorClient(
      cfg.coordinator(), cfg.tls_dir().empty() ? grpc::InsecureChannelCredentials()
                                               : yoke::common::TlsChannelCredentials(o->tls));
  yoke::worker::WorkerDaemon daemon(*opts, client.get());
  daemon.on_registered = [&](const std::string& id, bool first) {
    if (!first) return;
    std::printf("yoke-worker %s registered with %s\n", id.c_str(), cfg.coordinator().c_str());
    std::fflush(stdout);
  };
  std::thread(WaitForSignals, signals, &daemon).detach();
  spdlog::info("yoke-worker on {} (advertising {}): coordinator {}, work dir {}, trainer {}",
               opts->hostname, opts->advertise_address, cfg.coordinator(), o->work_dir,
               cfg.trainer_path());
  absl::Status s = daemon.Run();
  return s.ok() ? 0 : 1;
}
