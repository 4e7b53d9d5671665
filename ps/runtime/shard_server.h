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
// Workers that come and go (ps/runtime/links.h): each worker has its own
// link, served by a thread of its own that hands the main loop its pushes.
// Under sync a broken link fails Run() (sync is the data-parallel step, and
// a missing worker would change it). Under async and bounded the worker has
// departed: the gate stops waiting for it, its pushes already received are
// kept, and the others go on. Its next incarnation links up, is told the
// step to start at (the slowest live worker's, never below a step it pushed
// before) with the shard's values (wire.h), and joins the gate there.
//
#ifndef YOKE_PS_RUNTIME_SHARD_SERVER_H_
#define YOKE_PS_RUNTIME_SHARD_SERVER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/gloo_communicator.h"
#include "collective/store.h"
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
  // The data step every worker's first push of the attempt comes from: the
  // step of the checkpoint the attempt resumed from (0 on a fresh start).
  int64_t start_step = 0;
  // The link options for worker w's link (hostname, rank_hosts); default
  // GlooOptions when empty.
  std::function<collective::GlooOptions(int worker)> link_options;
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
  int64_t departures = 0;      // workers whose link broke (async, bounded)
  int64_t rejoins = 0;         // restarted workers that linked up again
  // Per worker: the data steps it pushed, in order and each once (wire.h).
  struct WorkerData {
    int64_t first_step = -1;  // its first push's; -1 before it
    int64_t next_step = 0;    // one past the last data step pushed
    int64_t pushes = 0;       // data steps pushed
    // Data steps that never reached this PS task: skipped by a restarted
    // worker's first push, since its earlier incarnation died pushing them.
    int64_t lost = 0;
  };
  std::vector<WorkerData> workers;
};

class ShardServer {
 public:
  // The PS task of `shard` (shard.ps) for `workers` workers, linking
  // through `store` (which must outlive the server); `initial` holds the
  // shard's shard.count starting values. `schedule` gives the rate per
  // update.
  static absl::StatusOr<std::unique_ptr<ShardServer>> Create(
      collective::Store* store, int workers, const Shard& shard, const float* initial,
      const v1::OptimizerSpec& optimizer, std::unique_ptr<engine::LrSchedule> schedule,
      const ServerOptions& options);
  ~ShardServer();

  absl::Status Run();
  // From any thread: Run() stops waiting for pushes and returns ABORTED (a
  // sibling replica of the process failed).
  void Abort();
  // Before Run(): the shard's part of each of `whole`'s optimizer state
  // arrays (named as Optimizer::State() names them), and the completed
  // update count. An array of the shard's size is the shard's part itself;
  // a larger one is the whole model's, and its slice at the shard's offset
  // is taken. INVALID_ARGUMENT if a name or size does not match this
  // optimizer's state.
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
  // What a link thread hands the main loop.
  struct Event {
    enum Kind { kLinked, kPush, kSnapshot, kLeft, kDied, kAborted, kFatal } kind;
    int worker = -1;
    int64_t incarnation = -1;
    PushHeader header;
    std::vector<float> grads;             // kPush
    std::shared_ptr<gloo::Context> link;  // kLinked
    absl::Status error;                   // kDied, kFatal
  };
  // The main loop's view of one worker.
  struct Worker {
    std::shared_ptr<gloo::Context> link;  // null while none is up
    int64_t incarnation = -1;             // the link's
    bool left = false;
    bool departed = false;   // its link broke, and no new one is up yet
    bool rejoining = false;  // linked again; its first push sets its clock
    int64_t high_water = 0;  // one past the last clock any incarnation pushed
    std::string why;         // why it departed
    // The join answer in flight (wire.h), until its first push shows it
    // arrived.
    std::vector<char> join;
    std::unique_ptr<gloo::transport::UnboundBuffer> join_buffer;
  };
  // Waits for worker w's join answer to be sent (its first push is in, so
  // it was) and frees it.
  void JoinSent(int w);

  ShardServer(collective::Store* store, int workers, const Shard& shard,
              std::unique_ptr<engine::LrSchedule> schedule, const ServerOptions& options);
  std::string Me() const;
  absl::Status Serve();
  absl::Status Handle(Event& e);
  absl::StatusOr<Event> NextEvent();
  // A link broke (the event's or a send's error): under sync the error,
  // else worker w has departed.
  absl::Status LinkFailed(int w, const absl::Status& error);
  absl::Status Linked(Event& e);
  // Worker w's push of data step `step` is its next one (wire.h): a skip
  // is allowed only as the first push after a rejoin.
  absl::Status CheckDataStep(int w, int64_t step, bool rejoined);
  absl::Status ReceivePush(int worker, const PushHeader& h, std::vector<float> grads);
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

  // The link threads (shard_server_links.cc): worker w's links, one
  // incarnation after another, and the pushes that come over them.
  void StartLinks();
  void StopLinks();
  void LinkLoop(int w);
  // Serves one link until it breaks (false) or the worker leaves (true).
  bool Receive(int w, int64_t incarnation, gloo::Context& link);
  void Post(Event e);
  bool Stopping();
  std::vector<float> TakeBuffer();
  void ReturnBuffer(std::vector<float> b);

  collective::Store* store_;
  int workers_;
  Shard shard_;
  std::unique_ptr<engine::LrSchedule> schedule_;
  ServerOptions options_;
  engine::ParamSet params_;
  std::unique_ptr<engine::Optimizer> optimizer_;
  StalenessGate gate_;
  std::map<int64_t, Pending> pending_;  // by clock
  std::vector<Answer> answers_;         // per worker
  std::vector<Worker> peers_;           // per worker
  struct SnapshotAsk {
    int worker;
    int64_t clock;
  };
  std::vector<SnapshotAsk> snapshots_;  // not yet answered
  ServerStats stats_;                   // Run's thread's
  // Publishes stats_ (with the pending pushes) for stats().
  void Publish();
  mutable absl::Mutex published_mu_;
  ServerStats published_ ABSL_GUARDED_BY(published_mu_);

  // Shared with the link threads.
  std::vector<std::thread> threads_;
  absl::Mutex mu_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Each link thread's header receive, to abort when stopping.
  std::vector<gloo::transport::UnboundBuffer*> receiving_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<float>> free_ ABSL_GUARDED_BY(mu_);  // gradient buffers
};

}  // namespace yoke::ps

#endif  // YOKE_PS_RUNTIME_SHARD_SERVER_H_
