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
// communicator (op_queue.h). Allreduce uses a cached gloo AllreduceRing with
// registered buffers for small messages and Gloo's pipelined ring
// (gloo::allreduce) for large ones (gloo_ops.h explains the choice);
// broadcast, allgather and barrier use Gloo's unbound-buffer collectives.
// Every op's Gloo tag folds in its signature ("allreduce 1000 f32 sum"), so
// ranks that disagree on an op never exchange bytes. Work::Wait blocks the
// caller until its op finishes, fails, or the communicator breaks.
//
// Allreduce supports kSum and kAverage for every DataType (f16/bf16 sums are
// rounded once per addition; integer averages truncate). An f32 buffer may
// travel as f16 or bf16 (AllreduceOptions::wire): it is converted into a
// scratch buffer, reduced in that type, converted back and, for kAverage,
// divided in f32.
//
// Failures (docs/collectives.md): a watchdog thread fails the running op
// once it is older than Options::timeout, with DEADLINE_EXCEEDED after a
// hang check (hang_check.h) that names the ranks that never arrived:
//   "allreduce #7 (bucket 3) on rank 0 of 2 timed out after 2s: ranks 1
//    never arrived"
// Ranks that called a different op #7 turn this into INVALID_ARGUMENT
// ("ranks disagree on op #7: rank 1 called allreduce 3000 f32 sum, this
// rank allreduce 1000 f32 sum"). Any Gloo error (a peer closed its
// connection) becomes UNAVAILABLE with Gloo's text and the hang check's
// verdict ("ranks 1 did not answer ... (dead or unreachable)"); Gloo
// exceptions never escape. Each of these breaks the communicator: the op,
// every queued op and every later op fail with the same status, and the
// other ranks' communicators break too (ABORTED) when the hang check asks
// them, so a late rank fails fast instead of waiting out its own timeout.
//
// Abort() may be called from any thread: it breaks the communicator and
// wakes every Wait() at once with ABORTED. Gloo cannot cancel an op in
// flight, so the background thread may stay inside Gloo until Gloo's own
// timeout (the op's timeout plus grace for unbound ops; connect_timeout,
// the pairs' timeout, for cached rings). The destructor waits
// GlooOptions::destroy_wait for it and otherwise detaches it (with a log
// line) instead of blocking; until it returns, Gloo may still write into
// that op's buffer.
//
// Leaving: the cached rings' registered buffers fail a wait with "Connection
// closed by peer" once the peer's connection has closed, even when the bytes
// waited for arrived before the close. So a rank that finishes its last
// allreduce first and exits at once can fail a peer that is still finishing
// it (seen between Docker containers on a loaded machine; in a loop of
// 2-rank allreduces on 2 cores with 8 threads spinning, 1 round in 1,000).
// Leave() (communicator.h)
// prevents it: a zero-byte message to and from every peer on a slot of its
// own, on unbound buffers (whose waits count a message that arrived before
// the close), run on the background thread after every op issued. Outside
// the op sequence and the watchdog; bounded by its timeout.
//
// Signals: Gloo writes to sockets with writev(), so a dead peer raises
// SIGPIPE; CreateGlooCommunicator sets SIGPIPE to SIG_IGN if it still has
// its default (process-killing) disposition, as Python does at start-up.
//
// Thread-safety: as Communicator (communicator.h).
#ifndef YOKE_COLLECTIVE_GLOO_COMMUNICATOR_H_
#define YOKE_COLLECTIVE_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/communicator.h"
#include "collective/store.h"

namespace yoke::collective {

struct GlooOptions {
  // The address this rank listens on for its peers (an IP or a hostname).
  std::string hostname = "127.0.0.1";
  // Who runs each rank ("w-1@10.0.0.5"), when known: connection failures
  // then name the peer's worker and address, not only its rank.
  std::vector<std::string> rank_hosts;
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
