// The shared-memory path for co-located ranks (issue 13): a Communicator for
// jobs where several ranks run on one host. f32 allreduces (the gradients)
// go through a POSIX shared-memory segment among the ranks of a host, and
// only one rank per host (its "leader", the lowest rank there; a rank alone
// on its host leads itself) talks to the other hosts, over a Gloo
// communicator of leaders only. So do i32 and i64
// allreduces (the reducer's per-step sample count). Everything else
// (broadcast, allgather, barrier, allreduces of f16/bf16 or with wire
// compression) is delegated to an inner Gloo communicator over all ranks,
// which keeps Gloo's semantics for them. (So ranks still open Gloo
// connections to every peer, as before, and a leader needs one more port
// per other host: GlooOptions' data-plane port range must allow for it.)
//
// Co-location is decided by GlooOptions::rank_hosts alone (two ranks share
// a host when the address after '@' is the same), never by whether a
// segment opens: /dev/shm is one tmpfs for every network namespace on a
// machine, so ranks of two "hosts" in namespaces would see each other's
// segments.
//
// The segment: one per host group and communicator, named
// "/yoke-shm-<128 random bits>" by the group's leader, created 0600 and
// O_EXCL, its space reserved up front (posix_fallocate, so a full /dev/shm
// means smaller chunks, down to 1/16, then an error at bootstrap that
// reaches every local rank, rather than a SIGBUS later); the name travels to
// the other local ranks through the rendezvous store, and the leader unlinks
// it as soon as every local rank has mapped it (or at once on any failure),
// so nothing is left in /dev/shm even when every process is killed later.
//
// An allreduce of `count` elements on L local ranks runs in chunks of at
// most ShmOptions::chunk_elems * 4 bytes; for each chunk:
//   1. every local rank copies its chunk into its own input slot;
//   2. reduce-scatter: local rank j sums the elements [m*j/L, m*(j+1)/L) of
//      the L input slots in local-rank order (((in0 + in1) + in2) + ...)
//      into the shared result slot;
//   3. across hosts (only when there are several): the leader allreduces the
//      result slot with the other hosts' leaders over Gloo (sum); every other
//      local rank waits for it;
//   4. all-gather: every local rank copies the whole result slot back into
//      its buffer, and divides by size() for kAverage.
// Integer sums are exact in any order. For f32, every rank gets the same
// bits. On one host with 2 ranks the sum is a + b, which (fp32 addition
// being commutative) is exactly what Gloo gives. Across hosts, element i is
// the sum over hosts of each host's local sum, the outer sum in Gloo's
// order for the leaders (on 2 hosts s0 + s1). So 2 hosts of 2 ranks each
// give (a0 + a1) + (a2 + a3), the same bits as 4 ranks on one host. With 3
// or more ranks the order may differ from Gloo's all-rank algorithms
// (halving-doubling, ring) in the last bits; never across ranks.
//
// Synchronisation: per-rank sequence counters in the segment (atomics on
// their own cache lines), waited on by spinning, then yielding, then
// sleeping on a futex in the segment that every counter store bumps (and
// wakes, when someone sleeps), with a 2 ms timeout. Every wait honours the op's
// timeout and Abort(), and checks the peers' liveness (their pids, every
// 100 ms): a local rank that died fails the op at once with UNAVAILABLE
// naming it; one that is merely late fails it at the timeout with
// DEADLINE_EXCEEDED naming the local ranks that never arrived. A failure or
// Abort() on one local rank marks the segment broken, so its local peers
// fail fast (ABORTED, naming that rank) instead of waiting out the timeout.
//
// Execution: ops run in issue order on the op queue's thread (op_queue.h);
// delegated ops are issued to the inner communicator from that thread and
// waited for there, so the order holds across both paths.
//
// CreateCommunicator (communicator.h) decides whether a rank takes this path
// and where it sits (LocalRanks); CreateShmCommunicator below builds it.
//
// Thread-safety: as Communicator (communicator.h).
#ifndef YOKE_COLLECTIVE_SHM_COMMUNICATOR_H_
#define YOKE_COLLECTIVE_SHM_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collective/communicator.h"
#include "collective/gloo_communicator.h"
#include "collective/store.h"

namespace yoke::collective {

struct ShmOptions {
  // Use the shared-memory path when ranks share a host. The environment
  // variable YOKE_SHM=0 turns it off as well; either way it must be the same
  // on every rank of a job.
  bool enabled = true;
  // f32 elements per slot (4 bytes each): larger allreduces run in chunks
  // of this many bytes. The segment holds (local ranks + 1) slots.
  int64_t chunk_elems = 1 << 20;
};

// Where a rank sits in the job, as CreateCommunicator found it from
// GlooOptions::rank_hosts (communicator.cc).
struct ShmPlacement {
  // The ranks that share its host, ascending, including it (LocalRanks()).
  std::vector<int> locals;
  // Every host's leader (its lowest rank), as its rank_hosts entry, hosts in
  // order of their leaders: the cross-host Gloo communicator's rank_hosts.
  std::vector<std::string> leader_hosts;
  // This rank's host: an index into leader_hosts (its leader's rank there).
  int host = 0;
};

// The hierarchical communicator for rank `rank` of `size` at `place` (the
// shared-memory segment when place.locals has 2 or more ranks, Gloo for the
// rest). INVALID_ARGUMENT for a null store or chunk_elems <= 0; the
// segment's bootstrap errors (shm_segment.h) and CreateGlooCommunicator's.
// Every local rank must call it with the same settings; `store` as for
// CreateCommunicator.
absl::StatusOr<std::unique_ptr<Communicator>> CreateShmCommunicator(Store* store, int rank,
                                                                    int size,
                                                                    const ShmPlacement& place,
                                                                    const GlooOptions& gloo,
                                                                    const ShmOptions& shm);

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_SHM_COMMUNICATOR_H_
