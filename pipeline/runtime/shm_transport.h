// ShmTransport: a pipeline stage's messages to and from the neighbours that
// share its host, through shared memory; the rest through another Transport
// (GlooTransport, across hosts).
//
// Each direction of a co-located link (stage a to stage b) is one ring in a
// shared-memory segment, made and bootstrapped as the shm communicator's
// (collective/shm_segment.h: a random 0600 name, its pages reserved up front,
// unlinked as soon as both stages have mapped it), under the store prefix
// "link-<a>-<b>/". The sender alone appends records to the ring and moves
// its head; the receiver alone marks records taken and moves its tail. A
// record is a 64-byte header (its state, kind, micro-batch, element count
// and length) and the message's floats, padded to 64 bytes; a record that
// would cross the ring's end is preceded by a skip record to the end.
//
// The Transport contract (transport.h) holds as VerifySchedule assumes it:
//   - Send copies the tensor into the ring and returns without waiting for
//     the receiver, as long as the ring has room. The caller sizes the ring
//     (capacity_bytes) for the messages the schedule keeps in flight on the
//     link, so in a training or evaluation step it never waits; where it
//     must (a /dev/shm too small for the asked size, which halves it), it
//     waits for the receiver to take older messages, within the timeout;
//   - Recv takes the oldest record of its (kind, micro-batch) between the
//     tail and the head, whatever came before it, so messages are matched by
//     key and not by arrival order, and one key's messages stay in order
//     from step to step.
//
// Synchronisation: head and tail are atomics in the segment (the sender's and
// the receiver's RankLine counters: `arrived` holds the bytes ever appended,
// `done` the bytes ever freed), published with release and read with
// acquire. A waiting stage spins, then yields, then sleeps on the segment's
// futex (bumped after every head or tail store) for 2 ms at a time. Every
// wait gives up, naming the message and the peer:
//   - UNAVAILABLE at once when the peer's process died ("died while this
//     rank waited for it", which the coordinator takes as a peer's echo);
//   - ABORTED at once when the peer broke or closed the link (its transport
//     failed, was aborted or was destroyed while this one waited);
//   - DEADLINE_EXCEEDED after `timeout`, as GlooTransport.
//
// Thread-safety: one stage's thread, except Abort (any thread).
#ifndef YOKE_PIPELINE_RUNTIME_SHM_TRANSPORT_H_
#define YOKE_PIPELINE_RUNTIME_SHM_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/store.h"
#include "pipeline/runtime/transport.h"

namespace yoke::collective::shm {
class Segment;
}  // namespace yoke::collective::shm

namespace yoke::pipeline {

struct ShmTransportOptions {
  // The bytes of the two rings of the link to the next stage (the lower
  // stage of a link makes both of its rings; the upper one learns their
  // size from it): activations go up, their gradients down. RingBytesFor
  // gives the size at which a send never waits.
  int64_t activation_ring_bytes = 64 << 20;
  int64_t gradient_ring_bytes = 64 << 20;
  // Bounds each receive, and a send's wait for room.
  absl::Duration timeout = absl::Seconds(60);
  // Bounds the bootstrap: the peer's segment name, and its mapping of ours.
  absl::Duration connect_timeout = absl::Seconds(60);
};

// Which links of a pipeline may use shared memory: entry i is true when
// stages i and i + 1 share a host, by their rank_hosts entries
// ("name@address", by stage; collective::RankHost). All false when the
// hosts are not known for every stage or some address is empty, and when
// YOKE_SHM=0 turns the shared-memory paths off, so that every stage decides
// alike (the same rule as the shm communicator's).
std::vector<bool> SharedLinks(const std::vector<std::string>& stage_hosts);

// The ring bytes for `in_flight` messages of at most `max_elems` floats
// each, with the room a record crossing the ring's end wastes (a ring must
// hold about two of its largest record: Send refuses a message that a ring
// could not take from every position).
int64_t RingBytesFor(int in_flight, int64_t max_elems);

class ShmTransport final : public Transport {
 public:
  // Connects stage `stage` of `stages`: a ring each way with every neighbour
  // n for which colocated[n] is true (colocated has one entry per stage),
  // bootstrapped through `store` (shared by the pipeline's stages, and
  // outliving the bootstrap). Messages to and from the other neighbours go
  // through `fallback`, which may be null only when every neighbour is
  // co-located. Both ends of a link must agree that it is co-located.
  // INVALID_ARGUMENT for a stage out of range, a missing fallback or a
  // non-positive capacity; the segments' bootstrap errors (shm_segment.h).
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Create(collective::Store* store, int stage,
                                                              int stages,
                                                              const std::vector<bool>& colocated,
                                                              const ShmTransportOptions& options,
                                                              std::unique_ptr<Transport> fallback);
  // Closes this stage's links: a neighbour still waiting on one fails at
  // once (ABORTED) instead of at its timeout.
  ~ShmTransport() override;

  absl::Status Send(int to, MessageKind kind, int micro_batch, const engine::Tensor& t) override;
  absl::Status Recv(int from, MessageKind kind, int micro_batch, engine::Tensor* dst) override;

  // Breaks every link with `why`: this stage's waits and its neighbours'
  // fail at once.
  void Abort(const absl::Status& why);

  // Whether messages to and from `neighbour` go through shared memory.
  bool shared(int neighbour) const;
  // The bytes of the ring from this stage to `neighbour` (0 if none).
  int64_t ring_bytes(int neighbour) const;
  // The most bytes that ring ever held at once (records and skips).
  int64_t peak_ring_bytes(int neighbour) const;

  struct Link;

 private:
  ShmTransport(int stage, const ShmTransportOptions& options, std::unique_ptr<Transport> fallback);
  // Marks every link broken by this stage and wakes its neighbours.
  void BreakLinks();
  // Waits on `l` until there(): spins, yields, then sleeps on the segment's
  // futex 2 ms at a time. Gives up on Abort, the peer's break of the link,
  // the peer's death or the timeout, each naming what() (built only then: a
  // message's steady state allocates nothing).
  absl::Status Await(Link& l, absl::FunctionRef<std::string()> what,
                     absl::FunctionRef<bool()> there);
  Link* OutTo(int to) const;
  Link* InFrom(int from) const;

  const int stage_;
  const ShmTransportOptions options_;
  std::unique_ptr<Transport> fallback_;
  // By neighbour: [0] the stage before, [1] the stage after.
  std::unique_ptr<Link> out_[2], in_[2];
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  absl::Status abort_why_;  // under abort_mu_, set before aborted_
};

}  // namespace yoke::pipeline

#endif  // YOKE_PIPELINE_RUNTIME_SHM_TRANSPORT_H_
