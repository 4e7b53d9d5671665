// The daemons' config files: a yoke.v1.CoordinatorConfig or
// yoke.v1.WorkerConfig written in YAML, read strictly (unknown keys are
// errors, as for job files; see config.h).
//
// Thread-safety: a pure function; safe from any thread.
#ifndef YOKE_CONFIG_DAEMON_CONFIG_H_
#define YOKE_CONFIG_DAEMON_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace yoke::common {

// Merges the YAML file at `path` into `*cfg`. Returns NOT_FOUND
// ("PATH: cannot open config file") when it cannot be read, and
// INVALID_ARGUMENT prefixed with "PATH" (and line:column for a YAML syntax
// error) for a malformed file or a field the message does not have.
absl::Status LoadDaemonConfig(const std::string& path, google::protobuf::Message* cfg);

}  // namespace yoke::common

#endif  // YOKE_CONFIG_DAEMON_CONFIG_H_
