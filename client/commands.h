// The `yoke` commands that talk to a coordinator: submit, jobs, get, watch,
// logs, cancel, workers. Each takes its command-line arguments (after the
// command name) and writes to `out` (results: tables, ids, JSON) and `err`
// (errors, and the live view when `out` carries JSON).
//
// Every command accepts --output text|json (-o) and --coordinator host:port
// (else $YOKE_COORDINATOR, else the `yoke up` state file, else
// 127.0.0.1:7070; see client.h).
//
// Exit codes: 0 success; 1 the job failed or was cancelled (watch), or the
// coordinator is unreachable or failed; 2 a usage error or a request the
// coordinator refused as wrong (INVALID_ARGUMENT, NOT_FOUND,
// FAILED_PRECONDITION, PERMISSION_DENIED, UNAUTHENTICATED, ...).
//
// Thread-safety: each call is independent; they share no state.
#ifndef YOKE_CLIENT_COMMANDS_H_
#define YOKE_CLIENT_COMMANDS_H_

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace yoke::client {

// True for the command names RunClusterCommand handles.
bool IsClusterCommand(const std::string& command);

// Runs one command; returns the process exit code.
int RunClusterCommand(const std::string& command, const std::vector<std::string>& args, FILE* out,
                      FILE* err);

// The exit code for a failed call: 2 for the caller's mistakes
// (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION, ALREADY_EXISTS,
// OUT_OF_RANGE, PERMISSION_DENIED, UNAUTHENTICATED), 1 otherwise.
int ExitCodeFor(const absl::Status& s);

// Usage text of the cluster commands, for `yoke help`.
extern const char kClusterCommandsUsage[];

}  // namespace yoke::client

#endif  // YOKE_CLIENT_COMMANDS_H_
