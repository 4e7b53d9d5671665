#include "worker/main_options.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/self_dir.h"
#include "common/status.h"
#include "worker/memory_cgroup.h"

namespace yoke::worker {
namespace {

constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";
// The least --memory-limit: below this no trainer starts.
constexpr int64_t kMinMemoryLimit = int64_t{64} << 20;

// The defaults, for what neither the file, the environment nor a flag set
// (proto3 cannot tell unset from zero; a flag can still set 0 CPU replicas
// for a GPU-only worker, or a stop grace of 0).
void FillDefaults(const common::ConfigFlags& flags, v1::WorkerConfig* cfg) {
  if (cfg->coordinator().empty()) cfg->set_coordinator(kDefaultCoordinator);
  if (cfg->cpu_replicas() == 0 && !flags.Given("cpu_replicas")) cfg->set_cpu_replicas(1);
  if (cfg->work_dir().empty()) cfg->set_work_dir("yoke-work");
  if (cfg->trainer_path().empty()) cfg->set_trainer_path(common::SelfDir() + "/yoke-trainer");
  if (cfg->log_level().empty()) cfg->set_log_level("info");
  if (cfg->heartbeat_interval_ms() <= 0) cfg->set_heartbeat_interval_ms(1000);
  if (cfg->stop_grace_ms() <= 0 && !flags.Given("stop_grace_ms")) cfg->set_stop_grace_ms(10000);
  if (cfg->memory_limit_bytes() == 0) {
    cfg->set_memory_limit_bytes(DefaultMemoryLimit(VisibleMemoryBytes()));
  }
}

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

WorkerFlags::WorkerFlags(common::FlagParser* parser)
    : config(parser, v1::WorkerConfig::descriptor()) {
  parser->String("--config", &config_path).Bool("--no-cuda", &no_cuda);
  config.String("--coordinator", "coordinator")
      .Int("--cpu-replicas", "cpu_replicas", 0, 1024)
      .String("--work-dir", "work_dir")
      .String("--trainer", "trainer_path")
      .Milliseconds("--stop-grace", "stop_grace_ms", absl::ZeroDuration(), "a duration like 10s")
      .Milliseconds("--heartbeat-interval", "heartbeat_interval_ms", absl::Nanoseconds(1),
                    "a positive duration like 1s")
      .String("--log-level", "log_level")
      .String("--advertise-address", "advertise_address")
      .String("--data-ports", "data_ports")
      .String("--metrics-listen", "metrics_listen")
      .Bytes("--memory-limit", "memory_limit_bytes", kMinMemoryLimit,
             "a size of at least 64MiB such as 48GiB (a plain number is bytes)")
      .String("--tls-dir", "tls_dir")
      .Switch("--insecure", "insecure");
}

absl::StatusOr<WorkerMainOptions> BuildWorkerOptions(const WorkerFlags& flags,
                                                     const common::EnvLookup& env) {
  WorkerMainOptions o;
  v1::WorkerConfig& cfg = o.config;
  if (!flags.config_path.empty()) {
    RETURN_IF_ERROR(common::LoadDaemonConfig(flags.config_path, &cfg));
  }
  if (std::string v = env("YOKE_ADVERTISE_ADDRESS"); !v.empty()) cfg.set_advertise_address(v);
  if (std::string v = env("YOKE_DATA_PORTS"); !v.empty()) cfg.set_data_ports(v);
  flags.config.Overlay(&cfg);
  FillDefaults(flags.config, &cfg);
  if (cfg.tls_dir().empty() && !cfg.insecure()) cfg.set_tls_dir(env("YOKE_TLS_DIR"));
  if (cfg.tls_dir().empty() && !cfg.insecure()) {
    return Invalid(
        "no TLS credentials: pass --tls-dir DIR (ca.crt, tls.crt, tls.key from `yoke "
        "certs issue --role worker --name ID`), or --insecure for development");
  }
  if (!cfg.tls_dir().empty() && cfg.insecure()) {
    return Invalid("--tls-dir and --insecure: choose one");
  }
  o.discover_cuda = !flags.no_cuda;
  if (!cfg.tls_dir().empty()) {
    auto tls = common::ReadCredentialsDir(cfg.tls_dir(), /*need_leaf=*/true);
    if (!tls.ok()) return Invalid(absl::StrCat("tls_dir: ", tls.status().message()));
    o.tls = *std::move(tls);
    std::error_code abs_ec;
    o.tls_ca_path = std::filesystem::absolute(cfg.tls_dir() + "/ca.crt", abs_ec).string();
  }
  if (cfg.cpu_replicas() < 0) {
    return Invalid(absl::StrCat("cpu_replicas: must be >= 0, got ", cfg.cpu_replicas()));
  }
  if (cfg.memory_limit_bytes() < kMinMemoryLimit) {
    return Invalid(absl::StrCat("memory_limit_bytes: must be at least ", kMinMemoryLimit,
                                " (64 MiB), got ", cfg.memory_limit_bytes()));
  }
  if (::access(cfg.trainer_path().c_str(), X_OK) != 0) {
    return Invalid(
        absl::StrCat("trainer_path: cannot execute ", cfg.trainer_path(), " (set --trainer)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(cfg.work_dir(), ec);
  if (ec) {
    return Invalid(absl::StrCat("work_dir: cannot create ", cfg.work_dir(), ": ", ec.message()));
  }
  o.work_dir = std::filesystem::absolute(cfg.work_dir(), ec).string();
  return o;
}

}  // namespace yoke::worker
