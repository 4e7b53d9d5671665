// Hang check: finds out, through the Store, which ranks never arrived at a
// collective that timed out. Shared by the Gloo and NCCL backends.
//
// Protocol (keys relative to the communicator's store):
//   hang/request/<r>  Set by a rank whose op timed out (or failed on a peer),
//                     once for every other rank r: "<seq>\n<its rank>\n
//                     <signature>\n<what>" (what: "allreduce #12 (bucket 3)
//                     on rank 0 of 4 timed out after 30s").
//   hang/state/<r>    Rank r's answer: "<issued_seq> <completed_seq>
//                     <signature of its op #seq>" (the signature names the
//                     op, count, dtype and reduction, e.g. "allreduce 1000
//                     f32 sum"; empty if unknown).
//
// Every communicator runs a HangListener, a thread that long-polls its own
// hang/request/<rank> key. When a request arrives it answers with its
// sequence numbers and then breaks its own communicator (ABORTED naming the
// request, or INVALID_ARGUMENT if its own op #seq has another signature), so
// that a rank that is merely late fails fast at its next op
// instead of waiting out a second timeout. The rank that timed out
// (CheckHang) waits up to a grace period for the answers: a rank whose
// issued_seq is below the op's seq never arrived; a rank that does not
// answer is dead or unreachable; a rank whose op #seq has another signature
// called a different op (mismatched counts, say): the backends fold the
// signature into the transport tag, so such a mismatch waits out the timeout
// instead of corrupting buffers, and is then reported as bad input.
//
// Why not record arrivals as ops are issued: that would cost one store
// round trip (a gRPC call to the coordinator) per collective; this scheme
// costs nothing until something has already gone wrong.
//
// Thread-safety: HangListener runs its own thread; CheckHang is reentrant.
#ifndef YOKE_COLLECTIVE_HANG_CHECK_H_
#define YOKE_COLLECTIVE_HANG_CHECK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "collective/store.h"

namespace yoke::collective {

struct SeqState {
  int64_t issued = 0;
  int64_t completed = 0;
  std::string signature;  // of the op asked about; empty if unknown
};

// A request as a listener receives it.
struct HangRequest {
  int64_t seq = 0;
  int from_rank = -1;
  std::string signature;  // the requester's op #seq
  std::string what;       // the requester's description of its failure
};

class HangListener {
 public:
  // Starts the thread. `state(seq)` reads this rank's sequence numbers and
  // the signature of its op #seq; `on_request` receives the request (called
  // at most once, on the listener thread). `store` must outlive the
  // listener.
  HangListener(Store* store, int rank, absl::Duration poll, std::function<SeqState(int64_t)> state,
               std::function<void(const HangRequest&)> on_request);
  // Wakes the thread (a Set of its own request key) and joins it; returns
  // within one store round trip while the store is reachable, and within
  // one `poll` otherwise.
  ~HangListener();

 private:
  void Run();

  Store* store_;
  int rank_;
  absl::Duration poll_;
  std::function<SeqState(int64_t)> state_;
  std::function<void(const HangRequest&)> on_request_;
  absl::Notification stop_;
  std::thread thread_;
};

struct HangVerdict {
  // "ranks 2,5 never arrived", plus "; ranks 3 did not answer within 3s
  // (dead or unreachable)" and "; rank 1 called allreduce 3000 f32 sum,
  // this rank allreduce 1000 f32 sum" where they apply, or "every rank
  // arrived (a peer is slow or stuck inside the op)".
  std::string text;
  bool mismatch = false;  // some rank called a different op #seq
};

// Called by `rank` (of `size`) when its op `seq` (with `signature`,
// described by `what`) timed out or failed. Sends the requests and waits up
// to `grace` for the answers.
HangVerdict CheckHang(Store* store, int rank, int size, int64_t seq, const std::string& signature,
                      const std::string& what, absl::Duration grace);

// The status an op fails with after CheckHang: INVALID_ARGUMENT if the
// ranks disagree on the op, DEADLINE_EXCEEDED if it `timed_out`, else
// UNAVAILABLE with the backend's `error` text. `what` leads the message.
absl::Status HangStatus(const std::string& what, bool timed_out, const std::string& error,
                        const HangVerdict& verdict);

// The status that breaks rank `rank` of `size` when a peer's request `r`
// arrives, given the signature of this rank's own op #r.seq (empty if
// unknown): INVALID_ARGUMENT if they differ, ABORTED otherwise.
absl::Status PeerFailureStatus(const HangRequest& r, int rank, int size,
                               const std::string& my_signature);

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_HANG_CHECK_H_
