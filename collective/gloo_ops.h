// The Gloo calls behind GlooCommunicator's ops (internal to the Gloo
// backend): allreduce algorithm choice, reduction functions, averaging.
//
// Allreduce picks, identically on every rank (the choice depends only on
// the op's count, dtype and the world size, never on pointers or timing):
//   - small messages (bytes * (size - 1) <= ring_max_bytes): a cached gloo
//     algorithm, one instance per (count, dtype), built on first use and
//     kept: AllreduceRing on 2 ranks, AllreduceHalvingDoubling (on a staging
//     buffer of its own) on 3 or more. Their buffers are registered with the
//     transport up front, so a peer's data lands directly in them even when
//     it arrives before this rank reaches the op. The unbound-buffer path
//     below leaves such early data in the socket, and Gloo's event loop then
//     spins on it, which costs a scheduler slice (~4 ms) per op on a busy
//     machine.
// Every path gives every rank the same bits (each element is reduced in one
// order, then copied), which keeps data-parallel replicas identical. gloo's
// AllreduceRing does not on 3+ ranks: each rank adds the others' buffers in
// its own order around the ring, and float addition is not associative.
//   - larger messages: gloo::allreduce (ring reduce-scatter + allgather,
//     pipelined in 1 MiB segments), which needs no copy and no registration.
// A ring is built after a one-element probe allreduce under the op's tag,
// so ranks that disagree on the op (mismatched counts) time out rather than
// overflow each other's registered buffers, which would abort the process
// inside Gloo's event loop. Cached instances are never destroyed while the communicator lives (a
// peer may still be sending into them), so their memory is capped
// (AllreduceCache::kMaxBytes); past the cap new sizes take the unbound path.
//
// Thread-safety: AllreduceCache is used by the communicator's op thread
// only.
#ifndef YOKE_COLLECTIVE_GLOO_OPS_H_
#define YOKE_COLLECTIVE_GLOO_OPS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>

#include "collective/communicator.h"
#include "gloo/context.h"

namespace yoke::collective {

class AllreduceCache {
 public:
  // Registered ring buffers beyond this many bytes go the unbound path.
  static constexpr size_t kMaxBytes = 64 << 20;

  explicit AllreduceCache(size_t ring_max_bytes);
  ~AllreduceCache();

  // In-place sum of `buf` (a CPU buffer) over `context`'s ranks. Throws
  // Gloo's exceptions. `tag` and `timeout` apply to the unbound path; the
  // ring path uses the pairs' timeout (GlooOptions::connect_timeout).
  void Sum(const std::shared_ptr<gloo::Context>& context, const Buffer& buf, uint32_t tag,
           std::chrono::milliseconds timeout);

  class Ring;  // a cached AllreduceRing of one (count, dtype)

 private:
  const size_t ring_max_bytes_;
  size_t bytes_ = 0;  // registered by cached rings
  std::map<std::pair<int64_t, DataType>, std::unique_ptr<Ring>> rings_;
};

// Divides every element of `b` by `n` in place (kAverage): f32 and integers
// natively (integers truncate), halves through f32.
void DivideBy(const Buffer& b, int n);

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_GLOO_OPS_H_
