// yoke-worker's command line, config file and environment, turned into the
// options it runs with (worker_main.cc has the program's documentation).
//
// Thread-safety: WorkerFlags is used while main parses its arguments (not
// thread-safe); BuildWorkerOptions may run on any thread.
#ifndef YOKE_WORKER_MAIN_OPTIONS_H_
#define YOKE_WORKER_MAIN_OPTIONS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "config/daemon_config.h"
#include "proto/yoke/v1/config.pb.h"
#include "security/certs.h"

namespace yoke::worker {

// The flags of yoke-worker, declared on `parser` (which must outlive this):
// --config, --no-cuda, and the flags that override the file's fields
// (--coordinator, --cpu-replicas, --work-dir, --trainer, --stop-grace,
// --heartbeat-interval, --log-level, --advertise-address, --data-ports,
// --metrics-listen, --memory-limit, --tls-dir, --insecure).
struct WorkerFlags {
  explicit WorkerFlags(common::FlagParser* parser);

  std::string config_path;     // --config; "" for none
  bool no_cuda = false;        // --no-cuda
  common::ConfigFlags config;  // the others, bound to v1::WorkerConfig
};

struct WorkerMainOptions {
  v1::WorkerConfig config;    // with the defaults filled in
  bool discover_cuda = true;  // false with --no-cuda
  common::Credentials tls;    // read from config.tls_dir(); empty when insecure
  std::string tls_ca_path;    // tls_dir/ca.crt made absolute; "" when insecure
  std::string work_dir;       // config.work_dir() made absolute; it exists
};

// The options yoke-worker runs with. The config is, by precedence: the flags
// given; $YOKE_ADVERTISE_ADDRESS and $YOKE_DATA_PORTS (over the file's
// advertise_address and data_ports only); the --config file; the defaults
// (coordinator 127.0.0.1:7070, cpu_replicas 1 unless --cpu-replicas 0 was
// given, work_dir yoke-work, trainer_path yoke-trainer beside this program,
// log_level info, heartbeat_interval_ms 1000 when <= 0, stop_grace_ms 10000
// when <= 0 unless --stop-grace was given, memory_limit_bytes
// DefaultMemoryLimit(VisibleMemoryBytes()) when 0, worker/memory_cgroup.h);
// then $YOKE_TLS_DIR when neither tls_dir nor insecure is set.
// Then it reads the TLS credentials, checks the trainer and creates the
// work directory. Errors, checked in this order, are what yoke-worker prints
// after "yoke-worker: " (exit 2): the config file; no TLS credentials; both
// tls_dir and insecure; "tls_dir: ..." (unreadable credentials);
// "cpu_replicas: must be >= 0"; "memory_limit_bytes: must be at least
// 67108864 (64 MiB), got N"; "trainer_path: cannot execute ...";
// "work_dir: cannot create ...". data_ports is not checked here: the worker
// parses it after discovering its devices.
absl::StatusOr<WorkerMainOptions> BuildWorkerOptions(const WorkerFlags& flags,
                                                     const common::EnvLookup& env = common::GetEnv);

}  // namespace yoke::worker

#endif  // YOKE_WORKER_MAIN_OPTIONS_H_
