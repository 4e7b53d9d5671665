// Links: the connections of a parameter-server job, one per (worker, PS
// task) pair and worker incarnation.
//
// Each link is a Gloo context of two ranks, the worker rank kLinkWorker and
// the PS task rank kLinkPs, bootstrapped through the job's store under
//   w<worker>/i<incarnation>/p<ps>/
// A worker's process is its incarnation: the first run of a worker is
// incarnation 0, and a worker restarted while the others go on is the next
// one. Before it connects, a worker writes its incarnation under
//   w<worker>/latest
// so a PS task whose link to the worker broke knows which incarnation to
// wait for (LatestIncarnation), also when one died before it reached every
// PS task.
//
// There are no links between workers and no full mesh: a dead worker breaks
// only its own links, the others' stay up, and a new incarnation connects
// afresh while they train.
//
// Thread-safety: reentrant.
#ifndef YOKE_PS_RUNTIME_LINKS_H_
#define YOKE_PS_RUNTIME_LINKS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/gloo_communicator.h"
#include "collective/store.h"
#include "ps/shard_map.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace yoke::ps {

inline constexpr int kLinkWorker = 0;
inline constexpr int kLinkPs = 1;

// "w1/i2/p0/".
std::string LinkPrefix(int worker, int64_t incarnation, int ps);

// Records `incarnation` as worker `worker`'s newest.
absl::Status AnnounceIncarnation(collective::Store* store, int worker, int64_t incarnation);
// Worker `worker`'s newest incarnation; DEADLINE_EXCEEDED if it announced
// none within `wait`.
absl::StatusOr<int64_t> LatestIncarnation(collective::Store* store, int worker,
                                          absl::Duration wait);

// One side of link (worker, incarnation, ps). `options` are the side's own
// (its hostname, and rank_hosts for the two ranks if known).
absl::StatusOr<std::shared_ptr<gloo::Context>> ConnectLink(collective::Store* store, int worker,
                                                           int64_t incarnation, int ps,
                                                           bool ps_side,
                                                           const collective::GlooOptions& options);

// A worker's side: announces the incarnation, then connects to the PS task
// of every shard of `map`, in shard order (PS tasks accept in worker order,
// so no two wait for each other). Result i is shard i's link.
absl::StatusOr<std::vector<std::shared_ptr<gloo::Context>>> ConnectWorkerLinks(
    collective::Store* store, int worker, int64_t incarnation, const ShardMap& map,
    const std::function<collective::GlooOptions(int ps)>& options);

}  // namespace yoke::ps

#endif  // YOKE_PS_RUNTIME_LINKS_H_
