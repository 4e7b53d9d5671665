#include "coordinator/main_options.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace yoke::server {
namespace {

constexpr char kDefaultListen[] = "127.0.0.1:7070";
constexpr char kDefaultStore[] = "yoke-coordinator.db";
constexpr int64_t kDefaultDeadlineMs = 10000;
constexpr int64_t kDefaultMaxPendingJobs = 100;
constexpr int64_t kDefaultMaxPendingSpecBytes = int64_t{16} << 20;
constexpr int64_t kDefaultMaxSubmitsPerMinute = 120;

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

// `s` with its ToString as the message, as yoke-coordinator has always
// printed these errors.
absl::Status Spelled(const absl::Status& s) { return absl::Status(s.code(), s.ToString()); }

}  // namespace

CoordinatorFlags::CoordinatorFlags(common::FlagParser* parser)
    : config(parser, v1::CoordinatorConfig::descriptor()) {
  parser->String("--config", &config_path);
  config.String("--listen", "listen")
      .String("--store", "store_path")
      .Milliseconds("--heartbeat-deadline", "heartbeat_deadline_ms", absl::Nanoseconds(1),
                    "a duration > 0 such as 10s")
      .Strings("--data-root", "data_roots")
      .Strings("--checkpoint-root", "checkpoint_roots")
      .String("--log-level", "log_level")
      .String("--tls-dir", "tls_dir")
      .String("--http-listen", "http_listen")
      .Switch("--insecure", "insecure");
}

absl::StatusOr<v1::CoordinatorConfig> BuildCoordinatorConfig(const CoordinatorFlags& flags,
                                                             const common::EnvLookup& env) {
  v1::CoordinatorConfig cfg;
  if (!flags.config_path.empty()) {
    if (absl::Status s = common::LoadDaemonConfig(flags.config_path, &cfg); !s.ok()) {
      return Spelled(s);
    }
  }
  flags.config.Overlay(&cfg);
  if (cfg.tls_dir().empty() && !cfg.insecure()) cfg.set_tls_dir(env("YOKE_TLS_DIR"));
  if (cfg.tls_dir().empty() && !cfg.insecure()) {
    return absl::InvalidArgumentError(
        "no TLS credentials: pass --tls-dir DIR (ca.crt, tls.crt, tls.key from `yoke "
        "certs issue --role coordinator`), or --insecure for development");
  }
  if (!cfg.tls_dir().empty() && cfg.insecure()) {
    return absl::InvalidArgumentError("--tls-dir and --insecure: choose one");
  }
  if (cfg.listen().empty()) cfg.set_listen(kDefaultListen);
  if (cfg.store_path().empty()) cfg.set_store_path(kDefaultStore);
  if (cfg.heartbeat_deadline_ms() == 0) cfg.set_heartbeat_deadline_ms(kDefaultDeadlineMs);
  if (cfg.log_level().empty()) cfg.set_log_level("info");
  if (cfg.heartbeat_deadline_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat_deadline_ms: must be > 0, got ", cfg.heartbeat_deadline_ms()));
  }
  if (cfg.max_pending_jobs_per_submitter() == 0) {
    cfg.set_max_pending_jobs_per_submitter(kDefaultMaxPendingJobs);
  }
  if (cfg.max_pending_spec_bytes_per_submitter() == 0) {
    cfg.set_max_pending_spec_bytes_per_submitter(kDefaultMaxPendingSpecBytes);
  }
  if (cfg.max_submits_per_minute_per_submitter() == 0) {
    cfg.set_max_submits_per_minute_per_submitter(kDefaultMaxSubmitsPerMinute);
  }
  for (const auto& [field, value] :
       {std::pair<const char*, int64_t>{"max_pending_jobs_per_submitter",
                                        cfg.max_pending_jobs_per_submitter()},
        {"max_pending_spec_bytes_per_submitter", cfg.max_pending_spec_bytes_per_submitter()},
        {"max_submits_per_minute_per_submitter", cfg.max_submits_per_minute_per_submitter()}}) {
    if (value < -1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be > 0, or -1 for no limit, got ", value));
    }
  }
  for (const auto& [field, value] :
       {std::pair<const char*, int64_t>{"max_running_devices_per_submitter",
                                        cfg.max_running_devices_per_submitter()},
        {"default_max_run_seconds", cfg.default_max_run_seconds()}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be > 0, or 0 for no limit, got ", value));
    }
  }
  if (cfg.listen().find(':') == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen: expected HOST:PORT, got '", cfg.listen(), "'"));
  }
  if (absl::Status s = CheckRoots("data_roots", cfg.data_roots()); !s.ok()) return Spelled(s);
  if (absl::Status s = CheckRoots("checkpoint_roots", cfg.checkpoint_roots()); !s.ok()) {
    return Spelled(s);
  }
  return cfg;
}

}  // namespace yoke::server
