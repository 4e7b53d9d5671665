// Logging setup: one spdlog logger for the process, written to stderr so that
// stdout stays free for machine-readable output (`--output json`).
//
// Thread-safe: spdlog's default logger may be used from any thread.
#ifndef YOKE_COMMON_LOGGING_H_
#define YOKE_COMMON_LOGGING_H_

#include <string>

#include "spdlog/spdlog.h"

namespace yoke::common {

// Installs a stderr logger named `name` at `level` ("debug", "info", "warn",
// "error"); an unknown level falls back to "info". Safe to call more than once.
void InitLogging(const std::string& name, const std::string& level = "info");

}  // namespace yoke::common

#endif  // YOKE_COMMON_LOGGING_H_
