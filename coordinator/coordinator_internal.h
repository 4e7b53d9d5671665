// Helpers shared by the Coordinator's .cc files (coordinator.cc,
// coordinator_jobs.cc, coordinator_workers.cc, coordinator_status.cc,
// coordinator_lifecycle.cc), and the pure steps of applying a worker's
// AttemptStatus, here so they can be tested alone (coordinator_status_test.cc).
// Not part of the coordinator's interface: only those files and their tests
// include it.
//
// Pure functions; thread-safe.
#ifndef YOKE_COORDINATOR_COORDINATOR_INTERNAL_H_
#define YOKE_COORDINATOR_COORDINATOR_INTERNAL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "coordinator/coordinator.h"
#include "proto/yoke/v1/coordinator.pb.h"

namespace yoke::server::coordinator_internal {

// A heartbeat carries at most this many lines per attempt, each at most
// kMaxLogText bytes; a runaway trainer must not flood the store.
inline constexpr int kMaxLogLines = 1000;
inline constexpr size_t kMaxLogText = 4096;
// restart.max_restarts when the spec leaves it unset.
inline constexpr int kDefaultMaxRestarts = 3;

// restart.max_restarts of `job`'s spec, or kDefaultMaxRestarts when unset.
int MaxRestarts(const v1::Job& job);
// Whether a trainer's exit `reason` says it ran out of memory (its own
// check, or its worker's memory cgroup): a retry would fail the same way.
bool OutOfMemory(absl::string_view reason);

// The restarts `job` has used of restart.max_restarts: every attempt after
// the first, and every share restarted alone (Assignment.incarnation).
int RestartsUsed(const v1::Job& job);

// "job/attempt": how the draining index and Worker.running name an attempt.
std::string AttemptKey(const std::string& job_id, int attempt);

// The share of `a` on `worker_id`; null if it has none there.
const v1::Assignment* ShareOf(const v1::Attempt& a, const std::string& worker_id);

// The log lines of `st` as the store takes them: each stamped with
// `attempt`, `rank` (the share's first rank) and `worker_id`, timed
// `now_ms` when the trainer left the time unset, cut to kMaxLogText bytes;
// at most kMaxLogLines of them, then one line (a copy of the last, same
// stamps) saying "[yoke: N more lines dropped]". Empty if `st` has none.
std::vector<v1::LogLine> LogLinesToStore(const v1::AttemptStatus& st, int attempt, int rank,
                                         const std::string& worker_id, int64_t now_ms);

// Adds `p`'s step, loss and accuracy to `curve` unless its newest point is
// that step already. The curve keeps at most `max_points` (>= 2): each
// `stride`-th step reported, and the newest one. When they would be more,
// the stride doubles and every other point goes, so the curve keeps its
// shape at an even spacing over the whole run, however long it is.
void AddCurvePoint(const v1::StepProgress& p, size_t max_points, JobCurve* curve);

// "trainer on w-1 exited with code 1: <its message>"; in a world of more
// than one rank the trainer's ranks are named too ("trainer of rank 1 on
// w-2"), and in a job of `pipeline_stages` > 1 their stages (rank r runs
// stage r % p + 1: "trainer of rank 1 (stage 2 of 2) on w-2"); an exit code
// above 128 reads "killed by signal N", and the worker's own "killed by
// signal N" at the start of st.reason() is not repeated.
std::string ExitReason(const v1::Attempt& a, const v1::Assignment& share,
                       const v1::AttemptStatus& st, int pipeline_stages = 1);

// True when a trainer's failure reads as the echo of a peer's: its
// connection to a peer was closed or reset, the hang listener broke its
// communicator for a peer's failure, or a local peer of its shared-memory
// group died or broke the group. Such an exit is not trusted to say
// why the attempt failed while the peer's own exit may still come.
bool PeerCaused(absl::string_view reason);

}  // namespace yoke::server::coordinator_internal

#endif  // YOKE_COORDINATOR_COORDINATOR_INTERNAL_H_
