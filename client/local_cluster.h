// `yoke up` and `yoke down`: a local cluster on loopback, one coordinator
// and N workers, for a laptop, a single box, `make demo` and the tests.
//
// `yoke up [--workers N] [--devices-per-worker K] [--dir DIR] [--port P]
//          [--data-root D ...] [--checkpoint-root D ...] [--detach]`
//   1. starts yoke-coordinator (found beside the yoke binary) with
//      --listen 127.0.0.1:P (P=0: a free port), its store DIR/coordinator.db
//      and its log DIR/coordinator.log, and reads the address it prints;
//   2. starts N yoke-worker processes (--cpu-replicas K, work dir
//      DIR/worker-I, log DIR/worker-I.log);
//   3. waits until all N workers have registered (ListWorkers), or fails
//      after the start timeout, stopping what it started and showing the
//      tail of the failing process's log;
//   4. writes the state file (cluster_state.h) and prints the address and an
//      `export YOKE_COORDINATOR=...` line.
// In the foreground it then waits for SIGINT/SIGTERM (or a daemon's death)
// and stops everything: workers first (so they do not fail their attempts
// against a vanished coordinator), then the coordinator. With --detach it
// returns after startup and `yoke down` stops the daemons later.
//
// The daemons run in their own sessions (setsid): a Ctrl-C on the terminal
// reaches only `yoke up`, which then stops them in order, and a detached
// cluster outlives the shell that started it. Restarting `yoke up` on the
// same --dir reuses the store, so its jobs survive, and the port recorded
// in DIR/coordinator.port. The coordinator's own command line can be
// restarted too: killed and started again with the same arguments (as a
// process supervisor would), it listens on the same port
// (coordinator/recorded_port.h), so its workers find it again.
//
// The process helpers they use (SpawnDaemon, StopProcess, ProcessIsNamed,
// LogTail, ...) are in daemon_process.h, included here.
//
// Thread-safety: single-threaded command code.
#ifndef YOKE_CLIENT_LOCAL_CLUSTER_H_
#define YOKE_CLIENT_LOCAL_CLUSTER_H_

#include <cstdio>
#include <string>
#include <vector>

#include "client/daemon_process.h"

namespace yoke::client {

// `yoke up ARGS...` / `yoke down ARGS...`; return the exit code.
int RunUp(const std::vector<std::string>& args, FILE* out, FILE* err);
int RunDown(const std::vector<std::string>& args, FILE* out, FILE* err);

extern const char kUpDownUsage[];

}  // namespace yoke::client

#endif  // YOKE_CLIENT_LOCAL_CLUSTER_H_
