// PsClient: a worker's side of a parameter-server job (ps/runtime/wire.h).
//
// After each backward the worker calls PushPull with its flat gradient
// buffer (the SUM over its samples of d loss / d theta, as the data-parallel
// trainer keeps it) and its sample count. The client pushes every shard to
// its PS task, then waits until each has answered with the shard's values,
// received straight into the flat value buffer: the parameters for the
// worker's next step. How long that takes is the staleness rule's business
// (ps/runtime/shard_server.h); the client only counts the wait. Leave() tells
// every PS task the worker is done. Snapshot fetches the values and the
// optimizer state of every shard for a checkpoint (wire.h).
//
// The gradient buffer must not change, and the value buffer must not be
// read, while PushPull runs; both hold ShardMap::total floats.
//
// Errors: a PS task that does not answer within the timeout fails PushPull
// with DEADLINE_EXCEEDED naming it and the step; a broken link with
// UNAVAILABLE. The client is unusable after an error.
//
// Thread-safety: one worker thread.
#ifndef YOKE_PS_RUNTIME_PS_CLIENT_H_
#define YOKE_PS_RUNTIME_PS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps/runtime/wire.h"
#include "ps/shard_map.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace yoke::ps {

struct ClientStats {
  int64_t pushes = 0;        // steps pushed (to every shard)
  double wait_seconds = 0;   // in PushPull, from the last push sent to the last answer
  double longest_wait = 0;   // the longest of those waits
  int64_t early_pushes = 0;  // shards pushed during backward (MarkReady), not after it
};

class PsClient {
 public:
  // `links[i]` is this worker's link to the PS task of map.shards[i]
  // (ConnectWorkerLinks, ps/runtime/links.h).
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(
      std::vector<std::shared_ptr<gloo::Context>> links, int worker, ShardMap map,
      absl::Duration timeout);
  ~PsClient();

  absl::Status PushPull(const float* grads, float* values, int64_t samples);
  // A restarted worker (incarnation > 0), before its first step: every
  // shard's values into `values`, and the clock to start at (the largest the
  // PS tasks name, wire.h). Errors as PushPull's.
  absl::Status Rejoin(float* values);
  // After Rejoin: one past the last step the worker's earlier incarnations
  // pushed (the largest any PS task saw; a push in flight when it died may
  // have reached only some of them).
  int64_t rejoined_pushed() const { return rejoined_pushed_; }
  // The data step of the next push (wire.h): `first` for the first push of
  // incarnation 0 (the step the attempt resumed from; 0 by default), then
  // one more per push; a rejoined worker's goes on from rejoined_pushed().
  // FAILED_PRECONDITION once a step was pushed.
  absl::Status StartAt(int64_t first);
  int64_t data_step() const { return step_; }

  // PushPull overlapped with backward, as the allreduce reducer's buckets
  // are: BeginStep before backward, MarkReady(p) as backward finishes
  // parameter p's gradient (each shard is pushed once all the parameters
  // it overlaps are ready), FinishStep after backward (pushes every shard
  // not pushed yet, then receives the answers into `values`, which backward
  // may read until then). PushPull is BeginStep + FinishStep. MarkReady
  // does nothing until SetParams has given each parameter's floats in the
  // flat buffer, (offset, count); it ignores indices out of range. A failed
  // push fails FinishStep.
  void SetParams(const std::vector<std::pair<int64_t, int64_t>>& params);
  absl::Status BeginStep(const float* grads, float* values, int64_t samples);
  void MarkReady(int param);
  absl::Status FinishStep();
  absl::Status Leave();
  // Between two steps: every shard's values after the updates of the steps
  // this worker has pushed (sync and bounded: exactly those; async: what
  // the shard holds), into `values`, and each optimizer state array's into
  // `state` (ShardMap::total floats each, in Optimizer::State() order);
  // `*optimizer_steps` gets the first shard's update count. Errors as
  // PushPull's, and INVALID_ARGUMENT if a PS task holds another number of
  // state arrays (another optimizer).
  absl::Status Snapshot(float* values, const std::vector<float*>& state, int64_t* optimizer_steps);
  // From any thread: ends a PushPull waiting now, or the next one, with
  // ABORTED (a sibling replica of the process failed).
  void Abort();

  int64_t clock() const { return clock_; }  // the next step
  const ClientStats& stats() const { return stats_; }

 private:
  PsClient(std::vector<std::shared_ptr<gloo::Context>> links, int worker, ShardMap map,
           absl::Duration timeout);
  // "PS task 1" (of shard i).
  std::string PsOf(size_t i) const;

  std::vector<std::shared_ptr<gloo::Context>> links_;  // per shard
  int worker_;
  ShardMap map_;
  absl::Duration timeout_;
  int64_t clock_ = 0;
  int64_t step_ = 0;  // the next push's data step
  int64_t rejoined_pushed_ = 0;
  bool left_ = false;
  // Overlap: each parameter's overlaps with the shards, (shard, floats),
  // and each shard's floats that belong to parameters.
  std::vector<std::vector<std::pair<size_t, int64_t>>> param_shards_;
  std::vector<int64_t> shard_param_floats_;
  // The step under way: its buffers (answers, headers, gradients), which
  // shards are pushed, the parameter floats each still waits for.
  bool in_step_ = false;
  std::vector<gloo::transport::UnboundBuffer*> step_buffers_;
  std::vector<bool> pushed_;
  std::vector<int64_t> remaining_;
  absl::Status step_error_;
  void PushShard(size_t i);
  std::vector<PushHeader> headers_;  // per shard, alive while their sends are
  ClientStats stats_;
  // The buffers of the step or snapshot under way, for Abort: whether each
  // receives (else it sends).
  struct Live {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    bool receives;
  };
  // Replaces live_ with `live` (ABORTED after Abort()); their raw pointers
  // in the same order.
  absl::StatusOr<std::vector<gloo::transport::UnboundBuffer*>> Track(std::vector<Live> live);
  absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Live> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace yoke::ps

#endif  // YOKE_PS_RUNTIME_PS_CLIENT_H_
