// Trainer: runs one job's training loop in this process.
//
// This is where the engine, the data pipeline and the collectives meet.
// `yoke train` runs it directly; the worker daemon runs it in a child process
// per attempt.
//
// A step: take the next batch from the prefetching pipeline (prepared on a
// background thread while the previous step computed), forward, loss,
// backward, optimizer update with the scheduled learning rate. The gradient
// of the loss is scaled by 1 / (samples in the global step), so a short last
// batch averages exactly. After each epoch the test split is evaluated (if
// the spec has one) and a checkpoint is written (if the spec names a
// directory); with checkpoint.every_steps, also every that many steps.
//
// Resume: a checkpoint holds the parameters, the state buffers, the optimizer
// state, the global step and the position in the epoch. Data order,
// augmentation and dropout masks are pure functions of (seed, epoch, step),
// so training N steps, saving, resuming and training M more is bit-identical
// to training N + M steps straight.
//
// Data parallelism. A job has world_size ranks (replicas); this Trainer runs
// the num_replicas consecutive ranks from first_rank on, each a thread with
// its own Model, loss, optimizer, data pipeline and Gloo communicator rank in
// the global group (local replica 0 runs on the thread that calls Run()).
// training.batch_size is the GLOBAL batch: each rank reads its disjoint slice
// of every global batch (data/sampler.h), so a per-replica batch B on N
// replicas means batch_size N·B, and the run equals one replica with batch
// N·B up to float summation order. Before the first step every rank takes
// global rank 0's parameters, state buffers and optimizer state (broadcast;
// on resume every rank also restores the same checkpoint). Every step:
// forward, loss as a per-sample SUM, backward with each finished gradient
// handed to the Reducer (collective/reducer.h, buckets overlap backward),
// Finish (the allreduced sample count and gradient sums), then the optimizer
// step with gradient scale 1 / global count: the exact mean over the samples
// of the step, however they were spread. The stop request travels with the
// count, so every rank stops after the same step. BatchNorm uses each
// replica's batch statistics (as DDP does); its running statistics are rank
// 0's (the ones evaluated and checkpointed). With
// distribution.sync_batch_norm, every BatchNorm normalises over all ranks'
// samples of the step instead (engine/layers/batch_norm.h: three small
// allreduces per layer and step on the rank's communicator), so the run
// equals one replica with the global batch even for models with BatchNorm;
// every rank must then get samples in every step (checked in Create). Only global rank 0 evaluates,
// checkpoints and reports epochs and the final result; every process reports steps, with the
// communicator's sequence numbers for hang attribution. A failed or timed-out
// collective fails Run() with the communicator's message, and aborts this
// process's other replicas so that they fail at once instead of timing out.
// With world_size 1 there is no communicator and no reducer: the loss scale
// 1 / batch is folded into dlogits, as always.
//
// Gradient accumulation (training.accumulation_steps = k): each optimizer
// step still covers the same global batch of training.batch_size samples
// (the same sampler slices), but a rank runs its slice as k micro-batches,
// forward and backward one after another, so activation memory is that of a
// micro-batch. Backward overwrites the gradients, so the first k-1
// micro-batches' gradients are summed into an accumulation buffer with no
// communication (like DDP's no_sync); in the last micro-batch's backward each
// parameter's accumulated sum is added back into its gradient just before
// the reducer is told it is ready, so the one allreduce per step still
// overlaps backward. The scale is still 1 / (samples of the whole step). A
// micro-batch j of step s draws dropout masks from stream s·k + j.
//
// Options applied after the allreduce, identically on every rank:
// training.clip_grad_norm scales the mean gradient down to that global L2
// norm (folded into the optimizer's gradient scale, like the 1 / count).
//
// Validation split and early stopping: data.validation_split holds out a
// fixed part of data.train (data/validation_split.h), evaluated like the test
// split after every epoch. training.early_stopping watches one of the epoch
// metrics; the decision is global rank 0's (it alone evaluates) and reaches
// the other ranks by a one-value broadcast at the end of each epoch, so all
// ranks stop after the same step. Its count (the best epoch, and the epochs
// since) goes into every checkpoint with the epoch history, so it survives a
// restart; the history itself is thinned past common::kMaxHistoryEpochs
// epochs (telemetry/epoch_history.h), so a job of many short epochs keeps
// bounded memory and checkpoint headers. checkpoint.keep_best writes
// the best epoch's checkpoint to <checkpoint.dir>/best.ckpt.
//
// CPU threads: training.threads (0 = all cores) is the process's budget. Each
// local replica's thread gets its own OpenMP pool (the nthreads ICV is per
// thread) of max(1, threads / num_replicas) threads, so the replicas together
// never oversubscribe the cores.
//
// Code: setup in trainer.cc, Run and the step loop in trainer_step.cc
// (RunLoop outlines a replica's run; each step is TrainStep), the log
// window's report, the epoch end and the run's end in trainer_epoch.cc,
// Evaluate in trainer_eval.cc, checkpoints in trainer_checkpoint.cc, progress
// reports in trainer_report.cc (Replica, LoopState and shared helpers:
// trainer_internal.h).
//
// Thread-safety: a Trainer is used from one thread; RequestStop() may be
// called from any thread (a signal handler's helper thread).
#ifndef YOKE_TRAINER_TRAINER_H_
#define YOKE_TRAINER_TRAINER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collective/communicator.h"
#include "collective/gloo_communicator.h"
#include "collective/store.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "proto/yoke/v1/checkpoint.pb.h"
#include "proto/yoke/v1/job.pb.h"
#include "proto/yoke/v1/metrics.pb.h"
#include "telemetry/tensorboard.h"
#include "trainer/progress.h"

namespace yoke::engine {
struct Checkpoint;
}  // namespace yoke::engine

namespace yoke::worker {

struct TrainerOptions {
  // Checkpoint file to continue from ("" starts fresh from the spec's seed).
  std::string resume;
  // The spec already passed common::ValidateJobSpec (yoke-trainer validates
  // a YAML spec itself; a --spec-file spec was validated at submit): Create
  // then checks only what depends on this machine (files, the checkpoint).
  bool spec_validated = false;
  // Receives progress; may be null.
  ProgressSink* progress = nullptr;

  // Data-parallel placement: the job's ranks, and the ones this Trainer runs,
  // [first_rank, first_rank + num_replicas).
  int world_size = 1;
  int first_rank = 0;
  int num_replicas = 1;
  // Rendezvous, needed when world_size > 1: a store shared by all ranks (not
  // owned; e.g. an InMemoryStore for threads of one test), or else the
  // coordinator's address ("host:port"), the job id and the attempt, for a
  // CoordinatorStore.
  collective::Store* store = nullptr;
  std::string coordinator;
  std::string job_id;
  int attempt = 0;
  // The address this process's Gloo pairs listen on.
  std::string hostname = "127.0.0.1";
  // Who runs each global rank, "worker@address" (`--rank-hosts`); empty if
  // unknown. Only for messages about peers.
  std::vector<std::string> rank_hosts;
  // Per-collective timeout (and rendezvous deadline); zero takes the spec's
  // distribution.collective_timeout_s (default 300 s).
  absl::Duration collective_timeout = absl::ZeroDuration();
  // Called on local replica 0 right after each optimizer step; may be empty.
  // For checks that compare the math step by step with another framework
  // (tests/parity): the step's dataset indices, its mean loss, and the
  // parameters (after the update) and gradients (as the optimizer applied
  // them, times its grad_scale: the batch mean when world_size is 1). On a
  // CUDA job these tensors are on the GPU, and the update may still be
  // running: read them with engine::CopyTensor into host tensors (which
  // waits), never through data<float>().
  struct StepRecord {
    int64_t step = 0;  // global, 0-based
    const std::vector<int64_t>* indices = nullptr;
    double mean_loss = 0;
    const engine::ParamSet* params = nullptr;
    const engine::Optimizer* optimizer = nullptr;  // its state after the update
  };
  std::function<void(const StepRecord&)> on_step;
  // Benchmarks and tests only (bench/ps_straggler_bench): a transient
  // straggler. Each step, with this probability (0: never), a replica sleeps
  // after its backward until the step has taken straggler_factor times its
  // compute time (a parameter-server replica, whose shards go out during
  // backward, sleeps before its step for as long, from its last step's
  // compute time); the draw is a pure function of (seed, rank, step).
  double straggler_probability = 0;
  double straggler_factor = 3;
  // Benchmarks only: a parameter-server replica pushes every shard after its
  // backward instead of each one as it becomes whole (what the overlap saves).
  bool ps_push_after_backward = false;
  // A parameter-server replica's incarnation (ps/runtime/links.h): 0 for its
  // first run; above 0 for a replica restarted while the others went on
  // (async and bounded), which pulls the values from the PS tasks and
  // resumes its data at the steps it had pushed before.
  int64_t ps_incarnation = 0;
  // Tests only: a parameter-server replica departs after this many steps
  // (0: never), dropping its links without leaving, as a killed process
  // does; Run() then fails with ABORTED.
  int64_t ps_depart_after_steps = 0;
};

class Trainer {
 public:
  // Validates the spec (ValidateJobSpec), opens the datasets, builds the
  // model, the loss and the optimizer, and restores `options.resume` if set.
  // (With options.spec_validated the spec itself is not validated again.)
  // Everything that can be wrong with the spec or the files fails here,
  // before any training: INVALID_ARGUMENT / NOT_FOUND naming the field or
  // file.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const v1::JobSpec& spec,
                                                         const TrainerOptions& options);
  ~Trainer();

  // Trains to the end of the spec (epochs, or training.max_steps), or until
  // RequestStop(); evaluates and checkpoints as the spec says.
  absl::StatusOr<v1::TrainResult> Run();

  // Asks Run() to stop after the current step (it then writes a checkpoint
  // if the spec has a directory, and returns the result so far).
  void RequestStop() { stop_.store(true); }

  // Evaluates the model on the test split: (mean loss, accuracy); (0, 0)
  // without one.
  absl::StatusOr<std::pair<double, double>> Evaluate();
  // The same on the held-out validation split (data.validation_split).
  absl::StatusOr<std::pair<double, double>> EvaluateValidation();

  // The data.train examples trained on, and the held-out ones (null without
  // a validation split).
  const data::Dataset& train_set() const { return *train_; }
  const data::Dataset* validation_set() const { return validation_.get(); }

  // Local replica i's model (global rank first_rank + i). A PS task has no
  // model: asking for one is a programming error (it aborts, naming it).
  engine::Model& model(int i = 0);
  int64_t global_step() const { return step_; }
  // A pipeline job: whether local replica 0's stage talks to a neighbour
  // through shared memory (pipeline/runtime/shm_transport.h).
  bool pipeline_through_shm() const;
  // Writes a checkpoint of the current state to `path`. Not for a pipeline
  // job, whose stages write theirs together (FAILED_PRECONDITION).
  absl::Status SaveCheckpoint(const std::string& path);

 private:
  struct Replica;    // one rank's model, optimizer, communicator, reducer
  struct LoopState;  // one replica's loop: position, data, sums (trainer_internal.h)

  Trainer() = default;
  bool distributed() const { return options_.world_size > 1; }
  absl::Status Restore(const std::string& path);
  // Mean loss and accuracy of local replica 0's model on `set` (null: 0, 0).
  absl::StatusOr<std::pair<double, double>> EvaluateOn(const std::shared_ptr<data::Dataset>& set);
  // Early stopping, from early_stopping_ (so a restart agrees: the
  // checkpoint carries it).
  struct EarlyStop {
    int best_epoch = 0;  // 1-based; 0 before the first epoch or when off
    bool stop = false;   // patience ran out
  };
  EarlyStop EarlyStopping() const;
  // Counts epoch `e` (the one after the last counted) into early_stopping_.
  void CountForEarlyStopping(const v1::EpochResult& e);
  // Checkpoints (trainer_checkpoint.cc), written by global rank 0 at s's
  // position; each sets last_checkpoint_ (or best_checkpoint_). In a
  // pipeline job every rank calls them at the same points, and pipeline 0's
  // stages send rank 0 their parts of one whole-model file
  // (GatherCheckpoint). Nothing without checkpoint.dir, unless said
  // otherwise.
  // After a step: one if end_of_epoch or the step is a multiple of
  // checkpoint.every_steps; then prunes to checkpoint.keep.
  absl::Status MaybeCheckpoint(LoopState& s, bool end_of_epoch);
  // At the end of an epoch: MaybeCheckpoint(s, true), unless the step
  // cadence just wrote one.
  absl::Status CheckpointEpochEnd(LoopState& s);
  // For checkpoint.keep_best (which validation allows only with a dir):
  // <dir>/best.ckpt, never pruned nor resumed from.
  absl::Status SaveBestCheckpoint(Replica& r);
  // A run that stopped mid-epoch: the exact position, so `--resume`
  // continues from it (not pruned).
  absl::Status SaveStopCheckpoint(LoopState& s);
  // Rank 0's header for a checkpoint of the Trainer's position.
  v1::CheckpointHeader CheckpointHeaderNow() const;
  // SaveCheckpoint, GatherCheckpoint in a pipeline job, or
  // SavePsCheckpoint in a parameter-server job.
  absl::Status WriteCheckpointOf(Replica& r, const std::string& path);
  // A parameter-server job's checkpoint (trainer_ps.cc), by the chief
  // (data-parallel rank 0; other replicas return at once): a snapshot of
  // every PS task's shard after the chief's last step, its values and
  // optimizer state received into the chief's own buffers, then the file
  // SaveCheckpoint writes, the one an allreduce job writes.
  absl::Status SavePsCheckpoint(Replica& r, const std::string& path);
  // A PS job's figures for s's progress report: its replica's pushes and
  // the window's waits, this process's PS tasks' updates (per second of
  // `window_seconds`) and queue.
  void FillPsWindow(LoopState& s, double window_seconds, v1::PsWindow* out);
  // TensorBoard (trainer_tensorboard.cc): opens the event file and writes the
  // spec as text; scalars of a log step and of an epoch. Failures are logged
  // and end the event file, never the training.
  void OpenEventFile();
  void WriteStepEvents(const v1::StepProgress& p);
  void WriteEpochEvents(int64_t step, const v1::EpochResult& e);
  // Rendezvous, reducer and broadcast of rank 0's state, on r's thread.
  absl::Status Connect(Replica& r);
  // The Gloo options of this process's ranks, and a new communicator put in
  // `*slot` under comm_mu_ (aborted at once when a sibling already failed).
  collective::GlooOptions GlooFor() const;
  void Adopt(std::unique_ptr<collective::Communicator>* slot,
             std::unique_ptr<collective::Communicator> comm);
  // Evaluation's data (in order, batches of training.eval_batch_size or
  // 500; with `labels_only`, no inputs) and its layer context.
  // Whether replica `r` reads only the labels of `set`'s batches: a
  // pipeline's later stage reads no input, so it decodes none, unless the
  // dataset may skip bad images (only reading a batch tells its size then).
  bool ReadsLabelsOnly(const Replica& r, const data::Dataset& set) const;
  absl::StatusOr<std::unique_ptr<data::Pipeline>> EvalPipeline(
      const std::shared_ptr<data::Dataset>& set, bool labels_only = false) const;
  engine::LayerContext EvalContext() const;
  // Connect's parts: rank 0's parameters, state and optimizer state
  // broadcast over `comm` (from its rank 0); every rank's resume position
  // checked against global rank 0's over r.comm; the gradient reducer over
  // `comm`.
  absl::Status BroadcastInitialState(Replica& r, collective::Communicator* comm);
  absl::Status CheckResumePosition(Replica& r);
  absl::Status CreateReducer(Replica& r, collective::Communicator* comm);

  // Replica r's training loop from the Trainer's position at Run(). Local
  // replica 0 keeps the Trainer's position and reports progress into
  // `result`; global rank 0 also evaluates and checkpoints.
  absl::Status RunLoop(Replica& r, v1::TrainResult* result);

  // The parts of RunLoop (trainer_step.cc, trainer_epoch.cc), in the order a
  // run calls them. Every rank calls the ones with collectives (TrainStep,
  // EndEpoch) at the same steps, so their collectives line up.
  // What TrainStep tells the loop.
  struct StepOutcome {
    float lr = 0;             // the step's scheduled learning rate
    int64_t global_n = 0;     // samples of the step over all ranks
    bool stop_voted = false;  // some rank voted to stop (RequestStop)
  };
  // Sets up s at the Trainer's position: the training pipeline (none when
  // the run is already over) and the gradient accumulation buffer.
  absl::Status StartLoop(LoopState& s);
  // This rank's stop vote for the coming step: 1 once RequestStop() was
  // called. Distributed, it travels with the step's sample count
  // (Reducer::Prepare) and Finish sums every rank's, so all ranks stop after
  // the same step; alone, RunLoop checks stop_ before each step instead.
  int64_t StopVote() const { return stop_.load() ? 1 : 0; }
  // One optimizer step on `batch` (s.step): the stop vote, forward and
  // backward (ForwardBackward), the allreduce (Reducer::Finish), clipping,
  // the optimizer update, the divergence check and options_.on_step. Adds
  // the step's loss to s's sums and its exposed and allreduce time to
  // s.window; the position is not advanced (EndStep does it).
  absl::StatusOr<StepOutcome> TrainStep(LoopState& s, data::Batch& batch);
  // The forward and backward passes of batch.n > 0 samples as k micro-batches
  // (s.accum): leaves the step's gradient sum in the model's gradients (and
  // handed to the reducer), adds every micro-batch's loss sum and correct
  // count to s.epoch_sums and s.window, and returns the step's loss sum.
  absl::StatusOr<double> ForwardBackward(LoopState& s, data::Batch& batch);
  // TrainerOptions::straggler_probability: maybe sleeps, as a straggler
  // whose step took straggler_factor x compute_seconds.
  void Straggle(const LoopState& s, double compute_seconds) const;
  // After a step of n local and global_n job samples that took `seconds`:
  // advances s's position, adds to its sums and the step-time histogram; the
  // lead mirrors the position, samples and time into the Trainer.
  void EndStep(LoopState& s, int64_t n, int64_t global_n, double seconds);
  // Reports the log window ending at s.step (progress OnStep, and global
  // rank 0's event file), then starts a new window.
  void ReportWindow(LoopState& s, float lr);
  // After the last step of an epoch: advances s to the next epoch; global
  // rank 0 evaluates it, reports it into `result`, checkpoints and decides
  // early stopping, which every rank then learns (ShareEarlyStop). Resets
  // s.epoch_sums.
  absl::Status EndEpoch(LoopState& s, v1::TrainResult* result);
  // Global rank 0: the finished epoch's result from s.epoch_sums and the
  // evaluation of the test and validation splits.
  absl::StatusOr<v1::EpochResult> SummarizeEpoch(const LoopState& s);
  // Global rank 0: the early-stopping decision once epoch e is in history_;
  // with checkpoint.keep_best, writes best.ckpt when e is the best so far.
  // Pipelined, it only sets s.save_best: every stage writes best.ckpt after
  // ShareEarlyStop.
  absl::Status DecideEarlyStop(LoopState& s, const v1::EpochResult& e);
  // A PS job that restarts replicas alone has no replicas' group: the chief
  // writes its decision to the attempt's store, and every other replica
  // reads it at each of its epoch ends and stops at the first one that
  // has trained at least the chief's epochs (under async and bounded the
  // replicas are not in step).
  absl::Status ShareEarlyStopThroughStore(LoopState& s);
  // Distributed, with early stopping: broadcasts global rank 0's decisions
  // (s.early_stop, s.save_best) to every rank (a collective on every rank,
  // once per epoch).
  absl::Status ShareEarlyStop(LoopState& s);
  // Every rank leaves its communicator's group before closing it; a failure
  // (a peer's own, reported there) is only logged.
  void LeaveGroup(Replica& r);
  // Global rank 0, after the last step: the result's final test metrics and
  // training loss; stopped mid-epoch, also a checkpoint of the exact
  // position (SaveStopCheckpoint).
  absl::Status FinishRun(LoopState& s, v1::TrainResult* result);
  // Pipeline jobs (trainer_pipeline.cc; docs/pipeline.md).
  bool pipelined() const { return stages_ > 1; }
  // The data-parallel replicas: pipelines, or every rank without one.
  int data_parallel_ranks() const { return (options_.world_size - ps_tasks_) / stages_; }
  // The whole model's parameters, where a replica may hold one stage.
  int64_t model_parameters() const;
  // In Create: the stage plan, and replica r's stage model and runner.
  absl::Status PlanPipeline(const engine::Shape& input, int classes);
  absl::Status CreateStage(Replica& r, const engine::Shape& input, int classes);
  // On r's thread: the global scalar communicator, the pipeline's transport,
  // and with several pipelines the stage's communicator and reducer.
  absl::Status ConnectPipeline(Replica& r);
  // Within ConnectPipeline: r's transport to its neighbouring stages
  // (shared-memory rings where they share its host, Gloo pairs otherwise).
  absl::Status ConnectStages(Replica& r, const collective::GlooOptions& pgo);
  // The batch evaluation runs (training.eval_batch_size, or its default).
  int EvalBatchSize() const;
  // Pipeline checkpoints (trainer_pipeline_checkpoint.cc). On every rank:
  // pipeline 0's stage sizes (into r.stage_params, r.stage_state), then,
  // resuming, this stage's part of the whole-model checkpoint
  // pipeline_resume_ read into r's parameters, state and optimizer state.
  absl::Status ShareStageSizes(Replica& r);
  absl::Status LoadStageSlices(Replica& r);
  // A collective of every rank: pipeline 0's stages broadcast their parts
  // in chunks, and rank 0 appends them to `path` as one checkpoint of the
  // whole model (the file a one-rank run writes), so it resumes onto any
  // split or none. No rank holds more than its stage and a chunk.
  absl::Status GatherCheckpoint(Replica& r, const std::string& path);
  // TrainStep for a stage: the schedule's micro-batches through the stages,
  // the stage's gradient reduced over the pipelines, the step's loss, count
  // and stop votes summed over every rank, then the optimizer step.
  absl::StatusOr<StepOutcome> PipelineStep(LoopState& s, data::Batch& batch);
  // training.clip_grad_norm: the norm of grad_scale x the whole model's
  // gradient, from every stage's sum of squares (a collective of every rank).
  absl::StatusOr<double> PipelineGradNorm(Replica& r, float grad_scale);
  // Every rank: the test and validation splits forwarded through pipeline
  // 0's stages, the last stage's sums shared with every rank (into
  // pipeline_eval_, which EvaluateOn then reports).
  absl::Status PipelineEvaluate(Replica& r);
  absl::StatusOr<std::pair<double, double>> PipelineEvaluateOn(
      Replica& r, const std::shared_ptr<data::Dataset>& set, int tag);
  // Parameter-server jobs (trainer_ps.cc; docs/parameter_servers.md).
  bool ps_job() const { return ps_tasks_ > 0; }
  // In Create, before the replicas: the layout's ranks and its check
  // against world_size and the first rank (a replica's).
  absl::Status AssignPsRoles();
  // A local replica's role (a replica's rank becomes its data-parallel rank).
  void SetPsRole(Replica& r) const;
  // A PS task's start in Create: its shard (ps_shard) and a copy of the
  // shard's values from local replica 0's initialised model (ps_values).
  // It builds no model: the task's memory is its shard's.
  absl::Status PreparePsTask(Replica& r);
  // Restore's part for a PS task: its shard's slice of the checkpoint's
  // values and of each optimizer state array (local replica 0, restored
  // first, names them and has checked their sizes).
  absl::Status RestorePsShard(Replica& r, const engine::Checkpoint& ck, const std::string& path);
  // A replica, on its thread: the replicas' communicator (with more than
  // one, unless PsRestartable), then its links to the PS tasks and its
  // client, and with ps_incarnation > 0 its rejoin.
  absl::Status ConnectPs(Replica& r);
  // Whether one replica may die and come back while the others train on:
  // async or bounded, and no early stopping (whose decision needs the
  // replicas' group).
  bool PsRestartable() const;
  // TrainerOptions::ps_depart_after_steps: ABORTED once the replica is due
  // to depart (its client, and so its links, dropped).
  absl::Status MaybeDepart(LoopState& s);
  // The Gloo options of the link between data-parallel rank `replica` and
  // PS task `ps` (their hosts, for errors).
  collective::GlooOptions LinkOptions(int replica, int ps) const;
  // A PS task's whole run, on its thread: serves its shard until every
  // replica has left (an idle task, one the model is too small for, returns
  // at once).
  absl::Status RunPsTask(Replica& r);
  // A replica's step exchange, around its backward: BeginPsStep before it
  // (n samples), during which each shard is pushed once its gradient is
  // whole (GradAccumulator tells the client); FinishPsStep after it pushes
  // the rest and pulls the values for the next step.
  absl::Status BeginPsStep(LoopState& s, int64_t n);
  absl::Status FinishPsStep(LoopState& s);
  // The Gloo options for a group of global ranks (their hosts in the group's
  // order).
  collective::GlooOptions GlooForRanks(const std::vector<int>& globals) const;
  // Progress lines about the PS job, at the start and the end.
  void ReportPs(bool end) const;
  // A replica failed with `why`: aborts the other local communicators.
  void AbortOthers(const Replica* failed, const absl::Status& why);
  // Progress lines before the first step (model, data, placement), and the
  // final report after the last (OnFinish on global rank 0).
  void ReportStart() const;
  void ReportEnd(const v1::TrainResult& result) const;

  v1::JobSpec spec_;
  TrainerOptions options_;
  std::shared_ptr<data::Dataset> train_, test_;
  std::shared_ptr<data::Dataset> validation_;  // held out of data.train, or null
  // The stores must outlive the communicators (in replicas_), which they do
  // by being declared first: members are destroyed in reverse order.
  std::unique_ptr<collective::Store> owned_store_;  // a CoordinatorStore
  std::unique_ptr<collective::Store> group_store_;  // our prefix of the store
  std::unique_ptr<collective::Store> ps_store_;     // the PS context's prefix
  std::vector<std::unique_ptr<Replica>> replicas_;
  absl::Duration collective_timeout_;
  absl::Mutex comm_mu_;  // guards the replicas' `comm` while they connect
  bool aborted_ ABSL_GUARDED_BY(comm_mu_) = false;
  std::unique_ptr<engine::LrSchedule> schedule_;
  int stages_ = 1;  // distribution.pipeline.stages, or 1
  // distribution.parameter_servers of a parameter-server job, else 0; the
  // job's workers and replicas per worker; the global rank of each
  // data-parallel rank and of each PS task.
  int ps_tasks_ = 0, ps_workers_ = 1, ps_per_worker_ = 1;
  std::vector<int> dp_globals_, ps_globals_;
  std::vector<int> stage_starts_;  // the first layer of each stage
  int model_layers_ = 0;
  // The whole model's, where a replica builds one stage of it.
  int64_t model_parameters_ = 0, model_macs_ = 0;
  // Pipelined evaluation's last results: test, then validation (loss,
  // accuracy).
  std::pair<double, double> pipeline_eval_[2] = {};
  int threads_ = 1;        // per replica
  engine::Device device_;  // the replicas' device: the CPU, or cuda:0
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  // Position: the next step runs batch `step_in_epoch_` of epoch `epoch_`.
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t step_in_epoch_ = 0;
  double train_seconds_ = 0;  // restored from checkpoints, for throughput
  int64_t samples_seen_ = 0;
  std::string last_checkpoint_;
  std::string best_checkpoint_;  // checkpoint.keep_best: <dir>/best.ckpt once written
  // Results of the epochs completed so far, restored ones included, thinned
  // past common::kMaxHistoryEpochs; they go into every checkpoint (rank 0
  // only), with early stopping's count after the last of them.
  google::protobuf::RepeatedPtrField<v1::EpochResult> history_;
  v1::EarlyStoppingState early_stopping_;
  // Global rank 0's TensorBoard event file (trainer_tensorboard.cc); null
  // when the spec asks for none, or after a write failed (logged once).
  std::unique_ptr<common::EventFileWriter> events_;
  std::string resumed_from_;  // the checkpoint Restore() read, or ""
  // Pipelined: Restore() read only the position; each stage loads its part
  // of this checkpoint once it knows where its part lies (ConnectPipeline).
  std::string pipeline_resume_;
  // The whole model's input shape and classes (a stage's differ).
  engine::Shape model_input_;
  int model_classes_ = 0;
  // Set by Run() before the replicas start: the restored history already
  // ended the run by early stopping.
  bool stopped_before_ = false;
  std::atomic<bool> stop_{false};
};

// Peak resident set size of this process, in bytes.
int64_t PeakRssBytes();

}  // namespace yoke::worker

#endif  // YOKE_TRAINER_TRAINER_H_
