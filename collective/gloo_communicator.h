// The Gloo backend: a Communicator over CPU buffers, with Gloo's TCP
// transport (loopback or any network Gloo can reach).
//
// Bootstrap: CreateGlooCommunicator makes a TCP device on
// GlooOptions::hostname, and every rank publishes its pair addresses through
// the Store (Gloo's full-mesh rendezvous, under the keys "gloo/<rank>") and
// connects to every other rank. Give every communicator a fresh store
// namespace (a PrefixStore per attempt and communicator): keys are never
// deleted.
//
// Execution: ops run in issue order on one background thread per
// communicator, with Gloo's allreduce (ring, pipelined in segments),
// broadcast, allgather (ring) and barrier. Work::Wait blocks the caller
// until its op finishes, fails, or the communicator is aborted.
//
// Allreduce supports kSum and kAverage for every DataType (f16/bf16 sums are
// rounded once per addition; integer averages truncate). An f32 buffer may
// travel as f16 or bf16 (AllreduceOptions::wire): it is converted into a
// scratch buffer, reduced in that type, converted back and, for kAverage,
// divided in f32.
//
// Failures: a Gloo op runs with Options::timeout as its Gloo timeout. When
// it times out the op fails with DEADLINE_EXCEEDED, after a hang check
// (hang_check.h) that names the ranks that never arrived:
//   "allreduce #7 (bucket 3) timed out after 2s on rank 0 of 2: ranks 1
//    never arrived"
// Any other Gloo error (a peer closed its connection, a size mismatch)
// becomes UNAVAILABLE with Gloo's text and the hang check's verdict; Gloo
// exceptions never escape. Either breaks the communicator: the op, every
// queued op and every later op fail with the same status.
//
// Abort() may be called from any thread: it breaks the communicator and
// wakes every Wait() at once with ABORTED. Gloo cannot cancel an op in
// flight, so the background thread may stay inside Gloo until the op's own
// timeout; the destructor waits GlooOptions::destroy_wait for it and
// otherwise detaches it (with a log line) instead of blocking. Until then
// Gloo may still write into that op's buffers.
//
// Thread-safety: as Communicator (communicator.h).
#ifndef YOKE_COLLECTIVE_GLOO_COMMUNICATOR_H_
#define YOKE_COLLECTIVE_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/communicator.h"
#include "collective/store.h"

namespace yoke::collective {

struct GlooOptions {
  // The address this rank listens on for its peers (an IP or a hostname).
  std::string hostname = "127.0.0.1";
  // How long bootstrap waits for the other ranks' addresses and connections.
  absl::Duration connect_timeout = absl::Seconds(60);
  // After a timeout, how long the hang check waits for the other ranks to
  // say how far they got.
  absl::Duration hang_grace = absl::Seconds(3);
  // How long one poll of the hang listener waits on the store (a long poll;
  // the destructor wakes it).
  absl::Duration hang_poll = absl::Seconds(10);
  // How long the destructor waits for an op stuck inside Gloo before it
  // detaches the background thread.
  absl::Duration destroy_wait = absl::Seconds(1);
  // Allreduces with bytes * (size - 1) up to this use a cached ring with
  // registered buffers (gloo_ops.h); larger ones Gloo's pipelined ring.
  size_t ring_max_bytes = 1 << 20;
};

// Connects rank `rank` of `size` through `store` (which must outlive the
// communicator). INVALID_ARGUMENT for size <= 0 or a rank outside
// [0, size); DEADLINE_EXCEEDED naming the missing ranks' keys if the others
// do not show up within connect_timeout; UNAVAILABLE if Gloo cannot listen
// or connect.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(Store* store, int rank,
                                                                     int size,
                                                                     const GlooOptions& options);

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_GLOO_COMMUNICATOR_H_
