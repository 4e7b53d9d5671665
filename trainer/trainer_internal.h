// Internal to the Trainer's .cc files (trainer.cc, trainer_step.cc,
// trainer_epoch.cc, trainer_eval.cc, trainer_checkpoint.cc, trainer_report.cc):
// the definitions of Trainer::Replica and Trainer::LoopState, and the small
// helpers they share. Not for other callers.
#ifndef YOKE_TRAINER_TRAINER_INTERNAL_H_
#define YOKE_TRAINER_TRAINER_INTERNAL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "collective/communicator.h"
#include "collective/reducer.h"
#include "data/pipeline.h"
#include "engine/device_backend.h"
#include "engine/model.h"
#include "engine/tensor.h"
#include "google/protobuf/repeated_field.h"
#include "pipeline/runtime/shm_transport.h"
#include "pipeline/runtime/stage_runner.h"
#include "pipeline/runtime/transport.h"
#include "ps/runtime/ps_client.h"
#include "ps/runtime/shard_server.h"
#include "trainer/trainer.h"

namespace yoke::worker {
namespace trainer_internal {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

inline engine::Tensor BatchInput(data::Batch& b) {
  return engine::Tensor::Wrap(b.x.data(), b.x_shape(), engine::DType::kF32);
}
inline engine::Tensor BatchLabels(data::Batch& b) {
  return engine::Tensor::Wrap(b.y.data(), {b.n}, engine::DType::kI32);
}

// `host` where a device model reads it: `host` itself on the CPU, else a
// copy in `*buffer`, which is (re)allocated on `device` when the shape
// changes (the last batch of an epoch), so a steady step allocates nothing.
inline absl::StatusOr<engine::Tensor> OnDevice(const engine::Tensor& host, engine::Device device,
                                               engine::Tensor* buffer, const char* what) {
  if (device.is_cpu()) return host;
  if (!buffer->defined() || buffer->shape() != host.shape() || buffer->dtype() != host.dtype()) {
    absl::StatusOr<engine::Tensor> fresh =
        engine::Tensor::Allocate(host.shape(), host.dtype(), device, what);
    if (!fresh.ok()) return fresh.status();
    *buffer = *std::move(fresh);
  }
  absl::Status s = engine::CopyTensor(*buffer, host);
  if (!s.ok()) return s;
  return *buffer;
}

inline collective::Buffer FlatBuffer(const engine::Tensor& t) {
  return collective::Buffer{t.raw(), t.numel(), collective::DataType::kF32,
                            collective::DeviceKind::kCpu, 0};
}

// Gradient accumulation over k micro-batches (training.accumulation_steps;
// see trainer.h) for one replica's model. Backward overwrites the gradients,
// so the sum of a step's earlier micro-batches is kept here, with no
// communication, and added back parameter by parameter during the step's
// last backward, just before the reducer is told that parameter is ready; the
// one allreduce per step still overlaps backward. With k == 1 there is no
// buffer and the one backward reports straight to the reducer.
//
// The callbacks handed to Model::Backward point at this object: it is
// neither copied nor moved.
class GradAccumulator {
 public:
  // `model` and `reducer` (null when alone) or `ps` (a parameter-server
  // replica's client, null otherwise) must outlive this. k >= 1.
  GradAccumulator(engine::Model& model, int64_t k, collective::Reducer* reducer,
                  ps::PsClient* ps = nullptr);
  GradAccumulator(const GradAccumulator&) = delete;
  GradAccumulator& operator=(const GradAccumulator&) = delete;

  // Allocates the sum buffer (k > 1 only); fails when memory is short.
  absl::Status Init();
  int64_t k() const { return k_; }

  // A new step: no earlier micro-batch is summed yet.
  void BeginStep() { have_sum_ = false; }
  // Backward of a micro-batch that is not its step's last: no communication;
  // its gradients join the sum.
  absl::Status Backward(const engine::Tensor& dlogits, const engine::LayerContext& ctx);
  // Backward of the step's last (or only) micro-batch: each parameter's
  // gradient gets the earlier micro-batches' sum added, then the reducer (if
  // any) or the PS client (which pushes each shard once it is whole) is
  // told it is ready. Afterwards the model's gradients are the step's whole
  // sum.
  absl::Status BackwardLast(const engine::Tensor& dlogits, const engine::LayerContext& ctx);

 private:
  // Adds the sum into parameter `id`'s gradient and marks it added.
  void AddSum(int id);

  engine::Model& model_;
  const int64_t k_;
  collective::Reducer* const reducer_;
  ps::PsClient* const ps_;
  engine::Tensor sum_;  // (padded_size,), like flat_grads; k > 1 only
  std::vector<char> added_;
  bool have_sum_ = false;                // sum_ holds this step's earlier micro-batches
  engine::Model::GradReadyFn on_ready_;  // k == 1: the reducer's or PS client's MarkReady, or null
  engine::Model::GradReadyFn last_ready_;  // k > 1: AddSum, then MarkReady
};

// Sums over a stretch of steps (an epoch, or a log window): this replica's
// samples, their loss sum and correct predictions, the job's samples (for
// throughput), and the steps' wall time.
struct Tally {
  double loss = 0;
  int64_t correct = 0;
  int64_t n = 0;
  int64_t global_n = 0;
  double seconds = 0;
};

// A log window's sums, and where its time went (v1::StepProgress fields
// 14-19).
struct Window : Tally {
  double data_wait = 0;  // waiting for the pipeline's next batch
  double comm = 0;       // allreduce time, hidden or not
  double exposed = 0;    // waiting in Reducer::Finish
  double grad_norm = 0;  // sum of the steps' global norms (with clipping)
  double ps_wait = 0;    // a PS job: waiting for the PS tasks' answers
  google::protobuf::RepeatedField<int64_t> histogram;  // step seconds
};

}  // namespace trainer_internal

// One rank: its own model, loss and optimizer, and (when distributed) its
// communicator and reducer. Owned by the Trainer, used by its replica thread.
struct Trainer::Replica {
  int local = 0;                // index among this Trainer's replicas
  int rank = 0;                 // global rank
  engine::Device device;        // where its model lives
  engine::Tensor x_dev, y_dev;  // a batch's input and labels on a device
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::Loss> loss;
  std::unique_ptr<engine::Optimizer> optimizer;
  std::unique_ptr<collective::Communicator> comm;  // set under comm_mu_
  // A pipeline job (distribution.pipeline): this rank runs stage `stage` of
  // data-parallel pipeline `pipeline` (rank = pipeline x stages + stage).
  // comm then spans every rank for the step's scalars only; the gradients
  // are reduced over stage_comm, the same stage's ranks of every pipeline
  // (none with one pipeline), and the activations travel over `transport`.
  int stage = 0;
  int pipeline = 0;
  std::unique_ptr<collective::Store> stage_store, pipe_store;
  std::unique_ptr<collective::Communicator> stage_comm;  // set under comm_mu_
  std::unique_ptr<pipeline::Transport> transport;
  // transport, where it is one (set under comm_mu_, for AbortOthers).
  pipeline::ShmTransport* shm_transport = nullptr;
  std::unique_ptr<pipeline::StageRunner> runner;
  // Pipeline 0's stages' flat sizes, by stage: parameters (and each optimizer
  // state tensor, which has their layout), then state buffers. Concatenated
  // in stage order they are the whole model's flat buffers (ParamSet pads
  // each entry alone), so a checkpoint holds the model, not the stages.
  std::vector<int64_t> stage_params, stage_state;
  // The most micro-batches in flight on this stage in any step, and the
  // activation bytes its buffers then held (StageRunner::StepResult).
  int peak_in_flight = 0;
  int64_t peak_activation_bytes = 0;
  std::unique_ptr<collective::Reducer> reducer;
  // A parameter-server job (trainer_ps.cc): a replica (rank is then its
  // data-parallel rank) pushes to the PS tasks through ps_client instead of
  // a reducer and an optimizer; a PS task (ps_task, rank its global rank)
  // runs ps_server over shard ps_index instead of a training loop. Each
  // replica has a link of its own to each PS task (ps/runtime/links.h).
  // ps_client and ps_server are set under comm_mu_, for AbortOthers.
  bool ps_task = false;
  int ps_index = 0;
  // A PS task has no model, loss or optimizer. Until its server starts
  // (RunPsTask, which then drops them) it holds its shard's initial values
  // and, resumed from a checkpoint, the shard's part of each optimizer state
  // array with the update count. ps_shard.count is 0 when the model is too
  // small for this task to hold a shard.
  ps::Shard ps_shard;
  engine::Tensor ps_values;
  std::vector<std::pair<std::string, engine::Tensor>> ps_state;
  int64_t ps_state_steps = 0;
  // Resumed: ps_state and ps_state_steps came from a checkpoint (the state
  // may hold no array: plain SGD's update count alone).
  bool ps_resumed = false;
  // A replica that rejoined (TrainerOptions::ps_incarnation > 0): the
  // global step its data resumes at (the steps it had pushed); -1 if not.
  int64_t rejoin_step = -1;
  std::unique_ptr<ps::PsClient> ps_client;
  std::unique_ptr<ps::ShardServer> ps_server;
  // Set when distribution.sync_batch_norm: batch_norm's statistics span
  // every replica's samples.
  std::unique_ptr<engine::CrossReplicaSum> sync_stats;
  absl::Status status;  // how RunLoop ended
};

// One replica's training loop (RunLoop) between its steps: position, data,
// gradient accumulation and progress sums. Lives on RunLoop's stack; the
// lead (local replica 0) mirrors the position into the Trainer after every
// step.
struct Trainer::LoopState {
  explicit LoopState(Replica& r, int64_t k)
      : rep(r), reducer(r.reducer.get()), accum(*r.model, k, r.reducer.get(), r.ps_client.get()) {}

  Replica& rep;
  collective::Reducer* const reducer;  // null when alone
  bool lead = false;                   // local replica 0: keeps the Trainer's position
  bool root = false;                   // global rank 0: evaluates, checkpoints, reports epochs
  ProgressSink* progress = nullptr;    // the lead's sink, else null
  // The next step runs batch `step_in_epoch` of epoch `epoch`.
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  std::unique_ptr<data::Pipeline> pipe;  // null when nothing is left to train
  trainer_internal::GradAccumulator accum;
  engine::Tensor dlogits;  // the loss gradient, reused while its shape holds
  trainer_internal::Tally epoch_sums;
  trainer_internal::Window window;
  bool early_stop = false;  // the ranks' agreed early-stopping decision
  bool save_best = false;   // pipelined: this epoch is the best; every rank writes best.ckpt
  int64_t ps_updates_reported = 0;  // a PS job: this process's PS updates at the last report
  double last_compute = 0;          // the last step's forward and backward seconds
};

}  // namespace yoke::worker

#endif  // YOKE_TRAINER_TRAINER_INTERNAL_H_
