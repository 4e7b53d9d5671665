// The state file of a local cluster started by `yoke up`: where its
// coordinator listens, the daemons' pids and its directory. `yoke up` writes
// it once every worker has registered; `yoke down` reads it to stop the
// daemons; every other command reads it to find the coordinator when neither
// --coordinator nor $YOKE_COORDINATOR names one.
//
// Location (DefaultClusterStatePath): $YOKE_STATE_DIR/cluster.json, else
// $XDG_RUNTIME_DIR/yoke/cluster.json, else /tmp/yoke-up-$UID/cluster.json.
// $YOKE_STATE_DIR lets tests (and users running several clusters) keep their
// clusters apart. The file is JSON, written atomically (temp file + rename).
//
// Thread-safety: pure functions over the file system.
#ifndef YOKE_CLIENT_CLUSTER_STATE_H_
#define YOKE_CLIENT_CLUSTER_STATE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace yoke::client {

struct ClusterState {
  std::string address;  // host:port of the coordinator
  std::string dir;      // store, logs and worker work dirs
  // The admin's credentials directory (DIR/tls/admin); "" when the cluster
  // runs --insecure.
  std::string tls_dir;
  int coordinator_pid = 0;
  std::vector<int> worker_pids;
  // The `yoke up` process itself while it runs in the foreground (0 with
  // --detach): `yoke down` asks it to stop the cluster, so it exits too.
  int up_pid = 0;
};

std::string DefaultClusterStatePath();

// Creates the parent directory (mode 0700) when missing. INTERNAL naming the
// path on an I/O error.
absl::Status WriteClusterState(const ClusterState& state, const std::string& path);

// NOT_FOUND when there is no file; INVALID_ARGUMENT naming the path and the
// field when it is not a state file this version wrote.
absl::StatusOr<ClusterState> ReadClusterState(const std::string& path);

}  // namespace yoke::client

#endif  // YOKE_CLIENT_CLUSTER_STATE_H_
