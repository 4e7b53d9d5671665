// ShardServer: a PS task's loop over the one shard of the parameters it
// holds (ps/runtime/wire.h), with the optimizer and its state for that
// shard.
//
// Every optimizer Yoke has (SGD with momentum or Nesterov, Adam, AdamW) is
// elementwise over the flat parameter buffer, so the shard's optimizer is
// the job's optimizer run over a ParamSet of one entry, the shard: the same
// arithmetic per float as a whole-model step. The learning rate follows the
// job's schedule, counted in the shard's updates.
//
// How pushes become updates (ServerOptions::consistency):
//   sync, bounded  the gradients pushed for clock c are kept per worker
//                  until every live worker has pushed c; then they are
//                  summed in worker order and applied as ONE update scaled
//                  by 1 / (their samples), clock after clock. That is the
//                  data-parallel step: with 2 workers the sum is the
//                  allreduce's to the bit. A worker's push of clock c is
//                  answered once the gate lets it start c + 1: under sync
//                  after clock c's update, under bounded s as soon as the
//                  slowest worker has pushed c - s, with the values of every
//                  update applied by then. So bounded with s = 0 is sync.
//                  Up to s + 1 clocks are pending: memory (s + 1) x workers
//                  x the shard.
//   async          each push is applied on arrival as its own update
//                  (scaled by its own samples) and answered at once.
// Run() returns once every worker has left.
//
// Checkpoints: a worker may ask for a snapshot of the shard (wire.h); the
// answer holds the values and the optimizer state after exactly the updates
// of the steps up to the one it names (sync, bounded), or the shard as it is
// (async). RestoreOptimizer puts a checkpoint's optimizer state back before
// Run(), and the learning-rate schedule goes on from its update count.
//
// Errors: a wait longer than the timeout for the next push fails Run() with
// DEADLINE_EXCEEDED naming the workers that owe one; a broken pair fails it
// with UNAVAILABLE; a push out of order (a clock other than the worker's
// next, a negative sample count) with INVALID_ARGUMENT naming the worker.
//
// Thread-safety: one thread runs Run(); stats() may be read from any
// thread at any time (the figures as of Run's last message).
#ifndef YOKE_PS_RUNTIME_SHARD_SERVER_H_
#define YOKE_PS_RUNTIME_SHARD_SERVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/param_set.h"
#include "ps/runtime/wire.h"
#include "ps/shard_map.h"
#include "ps/staleness.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace yoke::ps {

struct ServerOptions {
  Consistency consistency = Consistency::kSync;
  int64_t max_staleness = 0;  // kBounded only
  absl::Duration timeout = absl::Minutes(5);
};

struct ServerStats {
  int64_t pushes = 0;   // gradient pushes received
  int64_t updates = 0;  // optimizer steps applied
  // Answers held back by the staleness gate, and the most pushes ever
  // waiting for their clock's update at once (the PS's queue depth).
  int64_t held_answers = 0;
  int64_t max_pending_pushes = 0;
  int64_t snapshots = 0;       // snapshots answered (checkpoints)
  int64_t pending_pushes = 0;  // pushes waiting for their step's update now
};

class ShardServer {
 public:
  // `context` is rank PsRank(workers, shard.ps) of workers + PS tasks;
  // `initial` holds the shard's shard.count starting values. `schedule`
  // gives the rate per update.
  static absl::StatusOr<std::unique_ptr<ShardServer>> Create(
      std::shared_ptr<gloo::Context> context, int workers, const Shard& shard, const float* initial,
      const v1::OptimizerSpec& optimizer, std::unique_ptr<engine::LrSchedule> schedule,
      const ServerOptions& options);
  ~ShardServer();

  absl::Status Run();
  // From any thread: Run() stops waiting for pushes and returns ABORTED (a
  // sibling replica of the process failed).
  void Abort();
  // Before Run(): the shard's slice of each of `whole`'s optimizer state
  // arrays (the whole model's, named as Optimizer::State() names them), and
  // the completed update count. INVALID_ARGUMENT if a name or size does not
  // match this optimizer's state.
  absl::Status RestoreOptimizer(const std::vector<std::pair<std::string, engine::Tensor>>& whole,
                                int64_t steps);

  // The shard's values now (shard.count floats).
  const float* values() const { return params_.flat_values().data<float>(); }
  ServerStats stats() const;

 private:
  struct Pending {  // one clock's pushes, per worker
    std::vector<std::vector<float>> grads;
    std::vector<int64_t> samples;  // -1: not pushed
  };
  struct Answer {
    std::vector<float> values;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    bool in_flight = false;
    bool owed = false;  // the worker waits for it
  };

  ShardServer(std::shared_ptr<gloo::Context> context, int workers, const Shard& shard,
              std::unique_ptr<engine::LrSchedule> schedule, const ServerOptions& options);
  absl::Status ReceivePush(int worker, const PushHeader& h);
  absl::Status Apply(const float* grads, int64_t samples);
  // The clocks below this are complete: every live worker has pushed them
  // (all clocks, once no worker is live).
  int64_t CompleteClock() const;
  // Pushes waiting for their clock's update.
  int64_t PendingPushes() const;
  // Applies every clock all live workers have pushed, in order.
  absl::Status ApplyComplete();
  // Sends every owed answer the gate allows.
  absl::Status AnswerReady();
  absl::Status WaitSent(int worker, Answer& a);
  // A snapshot request of `worker` after its step `clock`; sent by
  // ServeSnapshots once that step's update is applied.
  absl::Status AskSnapshot(int worker, int64_t clock);
  absl::Status ServeSnapshots();

  std::shared_ptr<gloo::Context> context_;
  int workers_;
  Shard shard_;
  std::unique_ptr<engine::LrSchedule> schedule_;
  ServerOptions options_;
  engine::ParamSet params_;
  std::unique_ptr<engine::Optimizer> optimizer_;
  StalenessGate gate_;
  std::map<int64_t, Pending> pending_;  // by clock
  int64_t next_clock_ = 0;              // the next clock to apply (sync, bounded)
  std::vector<Answer> answers_;         // per worker
  struct SnapshotAsk {
    int worker;
    int64_t clock;
  };
  std::vector<SnapshotAsk> snapshots_;                     // not yet answered
  PushHeader header_;                                      // the inbox's message
  std::unique_ptr<gloo::transport::UnboundBuffer> inbox_;  // headers from any worker
  ServerStats stats_;                                      // Run's thread's
  // Publishes stats_ (with the pending pushes) for stats().
  void Publish();
  mutable absl::Mutex published_mu_;
  ServerStats published_ ABSL_GUARDED_BY(published_mu_);
};

}  // namespace yoke::ps

#endif  // YOKE_PS_RUNTIME_SHARD_SERVER_H_
