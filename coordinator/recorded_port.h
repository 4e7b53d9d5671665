// A coordinator started on port 0 keeps its port across restarts.
//
// `yoke up` (and anyone wanting "any free port") starts the coordinator with
// --listen HOST:0. Killed and restarted with that same command line, as a
// process supervisor does, it would bind a new port, and its workers, which
// retry only the address they were given, would never find it. So a
// coordinator that listens on port 0 with a store file records the port it
// bound in "<store>.port" beside the store, and the next one started on
// port 0 with that store tries the recorded port first. When that port is
// taken it says so (a warning naming the port and the file) and listens on
// a fresh port, which it records in turn. An explicit non-zero port is never
// overridden, and nothing is recorded for it; an in-memory store
// (":memory:") records nothing.
//
// Thread-safety: functions of the file system only; safe from any thread
// (two coordinators cannot share a store: it is held exclusively).
#ifndef YOKE_COORDINATOR_RECORDED_PORT_H_
#define YOKE_COORDINATOR_RECORDED_PORT_H_

#include <optional>
#include <string>

#include "absl/status/status.h"

namespace yoke::server {

// The file that records the port of the coordinator with this store:
// "<store_path>.port".
std::string RecordedPortPath(const std::string& store_path);

// True when `listen` (HOST:PORT) asks for port 0 and `store_path` is a file
// (not ":memory:"): the case where the port is recorded and reused.
bool KeepsItsPort(const std::string& listen, const std::string& store_path);

// The address to try first: `listen` with the port recorded for
// `store_path`, when KeepsItsPort and the file holds a port in [1, 65535];
// nullopt otherwise (no file, or one that does not hold a port).
std::optional<std::string> RecordedListen(const std::string& listen, const std::string& store_path);

// Records `port` for `store_path`, replacing the file atomically (a
// temporary file renamed over it). INTERNAL naming the file on failure.
absl::Status RecordPort(const std::string& store_path, int port);

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_RECORDED_PORT_H_
