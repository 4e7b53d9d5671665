// yoke-coordinator's command line and config file, turned into the config
// it runs with (coordinator_main.cc has the program's documentation).
//
// Thread-safety: CoordinatorFlags is used while main parses its arguments
// (not thread-safe); BuildCoordinatorConfig is a pure function of its
// arguments.
#ifndef YOKE_COORDINATOR_MAIN_OPTIONS_H_
#define YOKE_COORDINATOR_MAIN_OPTIONS_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/flags.h"
#include "config/daemon_config.h"
#include "proto/yoke/v1/config.pb.h"

namespace yoke::server {

// The flags of yoke-coordinator, declared on `parser` (which must outlive
// this): --config, and the flags that override the file's fields (--listen,
// --http-listen, --store, --heartbeat-deadline, --data-root,
// --checkpoint-root, --log-level, --tls-dir, --insecure).
struct CoordinatorFlags {
  explicit CoordinatorFlags(common::FlagParser* parser);

  std::string config_path;     // --config; "" for none
  common::ConfigFlags config;  // the others, bound to v1::CoordinatorConfig
};

// The config yoke-coordinator runs with: the --config file (if any), the
// flags given over it, then $YOKE_TLS_DIR when neither tls_dir nor insecure
// is set, then the defaults for what is still unset: listen 127.0.0.1:7070,
// store_path yoke-coordinator.db, heartbeat_deadline_ms 10000, log_level
// info, max_pending_jobs_per_submitter 100,
// max_pending_spec_bytes_per_submitter 16 MiB. Errors, checked in this
// order, are what yoke-coordinator prints after "yoke-coordinator: " (exit 2):
//   the config file cannot be read or parsed (the message is the status's
//     ToString: "NOT_FOUND: PATH: cannot open config file: ...");
//   neither tls_dir nor insecure ("no TLS credentials: pass --tls-dir ...");
//   both ("--tls-dir and --insecure: choose one");
//   heartbeat_deadline_ms < 0; a quota below -1; a listen address without ':';
//   a data_roots or checkpoint_roots entry that is not an absolute path
//     ("INVALID_ARGUMENT: data_roots[1]: must be an absolute directory, ...").
absl::StatusOr<v1::CoordinatorConfig> BuildCoordinatorConfig(
    const CoordinatorFlags& flags, const common::EnvLookup& env = common::GetEnv);

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_MAIN_OPTIONS_H_
