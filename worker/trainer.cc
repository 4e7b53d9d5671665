#include "worker/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sys/stat.h>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_validate.h"
#include "collective/coordinator_store.h"
#include "collective/gloo_communicator.h"
#include "collective/reducer.h"
#include "common/status.h"
#include "data/open_dataset.h"
#include "data/pipeline.h"
#include "engine/checkpoint.h"
#include "engine/kernels/cpu/dnnl_context.h"

namespace yoke::worker {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Creates `dir` and its parents (like mkdir -p).
absl::Status MakeDirs(const std::string& dir) {
  std::string cur;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::InternalError(
            absl::StrCat("cannot create directory ", cur, ": ", std::strerror(errno)));
      }
    }
    if (i < dir.size()) cur.push_back(dir[i]);
  }
  return absl::OkStatus();
}

engine::Tensor BatchInput(data::Batch& b) {
  return engine::Tensor::Wrap(b.x.data(), b.x_shape(), engine::DType::kF32);
}
engine::Tensor BatchLabels(data::Batch& b) {
  return engine::Tensor::Wrap(b.y.data(), {b.n}, engine::DType::kI32);
}

collective::Buffer FlatBuffer(const engine::Tensor& t) {
  return collective::Buffer{t.raw(), t.numel(), collective::DataType::kF32,
                            collective::DeviceKind::kCpu, 0};
}

// Synchronized batch norm's sums, over the replica's own communicator. They
// queue behind the gradient buckets already in flight, which keeps one order
// of ops on every rank: each rank's layers call this at the same points of
// the same forward and backward.
class CommunicatorSum final : public engine::CrossReplicaSum {
 public:
  CommunicatorSum(collective::Communicator* comm, absl::Duration timeout)
      : comm_(comm), timeout_(timeout) {}
  absl::Status SumInPlace(float* data, int64_t count, const std::string& what) override {
    collective::AllreduceOptions o;
    o.timeout = timeout_;
    o.tag = what;
    return comm_
        ->Allreduce(collective::Buffer{data, count, collective::DataType::kF32,
                                       collective::DeviceKind::kCpu, 0},
                    o)
        ->Wait();
  }

 private:
  collective::Communicator* const comm_;
  const absl::Duration timeout_;
};

}  // namespace

// One rank: its own model, loss and optimizer, and (when distributed) its
// communicator and reducer. Owned by the Trainer, used by its replica thread.
struct Trainer::Replica {
  int local = 0;  // index among this Trainer's replicas
  int rank = 0;   // global rank
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::Loss> loss;
  std::unique_ptr<engine::Optimizer> optimizer;
  std::unique_ptr<collective::Communicator> comm;  // set under comm_mu_
  std::unique_ptr<collective::Reducer> reducer;
  // Set when distribution.sync_batch_norm: batch_norm's statistics span
  // every replica's samples.
  std::unique_ptr<engine::CrossReplicaSum> sync_stats;
  absl::Status status;  // how RunLoop ended
};

int64_t PeakRssBytes() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

Trainer::~Trainer() = default;

engine::Model& Trainer::model(int i) { return *replicas_[i]->model; }

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const v1::JobSpec& spec,
                                                         const TrainerOptions& options) {
  if (!options.spec_validated) RETURN_IF_ERROR(common::ValidateJobSpec(spec));
  if (options.world_size < 1 || options.num_replicas < 1 || options.first_rank < 0 ||
      options.first_rank + options.num_replicas > options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer: ranks [", options.first_rank, ", ", options.first_rank + options.num_replicas,
        ") (first rank, local replicas) must lie in [0, world size ", options.world_size,
        ")"));
  }
  if (options.world_size > 1 && options.store == nullptr && options.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "trainer: a world size above 1 needs a rendezvous (a store, or the coordinator's "
        "address with the job id and attempt)");
  }
  std::unique_ptr<Trainer> t(new Trainer());
  t->spec_ = spec;
  t->options_ = options;
  const v1::TrainingSpec& tr = spec.training();
  if (spec.distribution().device() == "cuda") {
    return absl::UnimplementedError(
        "distribution.device: 'cuda' needs the CUDA backend, which this build does "
        "not have yet; use 'cpu'");
  }
  // The process's thread budget is split evenly over its replicas (see the
  // header); this thread runs local replica 0.
  const int budget = tr.threads() > 0
                         ? tr.threads()
                         : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  t->threads_ = engine::cpu::SetCpuThreads(std::max(1, budget / options.num_replicas));
  const int timeout_s = spec.distribution().collective_timeout_s() > 0
                            ? spec.distribution().collective_timeout_s()
                            : 300;
  t->collective_timeout_ = options.collective_timeout > absl::ZeroDuration()
                               ? options.collective_timeout
                               : absl::Seconds(timeout_s);

  ASSIGN_OR_RETURN(auto train, data::OpenDataset(spec.data().train(), "data.train"));
  t->train_ = std::move(train);
  if (spec.data().has_test()) {
    ASSIGN_OR_RETURN(auto test, data::OpenDataset(spec.data().test(), "data.test"));
    if (test->example_shape() != t->train_->example_shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.test: examples of shape ", data::ShapeToString(test->example_shape()),
          " do not match data.train's ", data::ShapeToString(t->train_->example_shape())));
    }
    t->test_ = std::move(test);
  }
  int classes = t->train_->num_classes();
  if (t->test_) classes = std::max(classes, t->test_->num_classes());

  engine::Shape input(t->train_->example_shape().begin(), t->train_->example_shape().end());
  for (int i = 0; i < options.num_replicas; ++i) {
    auto r = std::make_unique<Replica>();
    r->local = i;
    r->rank = options.first_rank + i;
    ASSIGN_OR_RETURN(r->model, engine::Model::Create(spec.model(), input, classes));
    ASSIGN_OR_RETURN(r->loss, engine::CreateLoss(tr.loss().empty() ? "softmax_cross_entropy"
                                                           : tr.loss()));
    ASSIGN_OR_RETURN(r->optimizer, engine::CreateOptimizer(tr.optimizer(), &r->model->params()));
    r->model->params().Initialize(tr.seed());
    t->replicas_.push_back(std::move(r));
  }

  // Synchronized batch norm needs every rank in every step's sums, so no
  // rank may be left without samples (the trainer skips forward and backward
  // on an empty slice).
  const int64_t last_batch = t->train_->size() % tr.batch_size();
  if (spec.distribution().sync_batch_norm() && options.world_size > 1 &&
      (tr.batch_size() < options.world_size ||
       (last_batch != 0 && last_batch < options.world_size))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "distribution.sync_batch_norm: every replica needs at least one example in every "
        "step, but ",
        tr.batch_size() < options.world_size
            ? absl::StrCat("training.batch_size is ", tr.batch_size())
            : absl::StrCat("the last step of each epoch has ", last_batch, " of the ",
                           t->train_->size(), " training examples"),
        " for ", options.world_size,
        " replicas; change the batch size or data.train.num_examples, or use fewer "
        "replicas"));
  }
  t->steps_per_epoch_ = (t->train_->size() + tr.batch_size() - 1) / tr.batch_size();
  t->total_steps_ = t->steps_per_epoch_ * tr.epochs();
  if (tr.max_steps() > 0) t->total_steps_ = std::min(t->total_steps_, tr.max_steps());
  ASSIGN_OR_RETURN(t->schedule_, engine::CreateSchedule(tr.schedule(), tr.optimizer().lr(),
                                                t->total_steps_));

  if (!options.resume.empty()) RETURN_IF_ERROR(t->Restore(options.resume));
  if (!spec.checkpoint().dir().empty() && options.first_rank == 0) {
    RETURN_IF_ERROR(MakeDirs(spec.checkpoint().dir()));
  }
  return t;
}

absl::Status Trainer::SaveCheckpoint(const std::string& path) {
  v1::CheckpointHeader h;
  h.set_step(step_);
  h.set_epoch(epoch_);
  h.set_step_in_epoch(step_in_epoch_);
  h.set_seed(spec_.training().seed());
  *h.mutable_spec() = spec_;
  const Replica& r = *replicas_[0];
  h.set_optimizer_step(r.optimizer->step_count());
  h.set_world_size(options_.world_size);
  h.set_wall_seconds(train_seconds_);
  h.set_samples_seen(samples_seen_);
  engine::NamedTensors tensors = {{"params", r.model->params().flat_values()},
                          {"state", r.model->params().flat_state()}};
  for (auto& [name, t] : r.optimizer->State()) tensors.emplace_back("optim/" + name, t);
  return engine::WriteCheckpoint(path, h, tensors);
}

absl::Status Trainer::Restore(const std::string& path) {
  ASSIGN_OR_RETURN(engine::Checkpoint ck, engine::ReadCheckpoint(path));
  auto restore = [&](const std::string& name, const engine::Tensor& dst) -> absl::Status {
    const engine::Tensor* src = ck.Find(name);
    if (src == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", path, " has no '", name, "' tensor"));
    }
    if (src->numel() != dst.numel() || src->dtype() != dst.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", path, ": '", name, "' holds ", src->numel(),
          " values but this model needs ", dst.numel(),
          " (was it written for a different model?)"));
    }
    dst.CopyFrom(*src);
    return absl::OkStatus();
  };
  // Every local replica restores the same checkpoint (and Connect() then
  // broadcasts rank 0's copy anyway).
  for (auto& r : replicas_) {
    RETURN_IF_ERROR(restore("params", r->model->params().flat_values()));
    RETURN_IF_ERROR(restore("state", r->model->params().flat_state()));
    for (auto& [name, t] : r->optimizer->State()) {
      RETURN_IF_ERROR(restore("optim/" + name, t));
    }
    r->optimizer->set_step_count(ck.header.optimizer_step());
  }
  step_ = ck.header.step();
  epoch_ = ck.header.epoch();
  step_in_epoch_ = ck.header.step_in_epoch();
  train_seconds_ = ck.header.wall_seconds();
  samples_seen_ = ck.header.samples_seen();
  if (step_in_epoch_ >= steps_per_epoch_) {
    epoch_ += step_in_epoch_ / steps_per_epoch_;
    step_in_epoch_ %= steps_per_epoch_;
  }
  if (options_.progress) {
    options_.progress->OnInfo(absl::StrFormat(
        "resumed from %s (written by %d replicas): step %d, epoch %d, batch %d of %d", path,
        std::max<int64_t>(ck.header.world_size(), 1), step_, epoch_ + 1, step_in_epoch_,
        steps_per_epoch_));
  }
  return absl::OkStatus();
}

absl::Status Trainer::MaybeCheckpoint(bool end_of_epoch) {
  const v1::CheckpointSpec& c = spec_.checkpoint();
  if (c.dir().empty()) return absl::OkStatus();
  bool due = end_of_epoch || (c.every_steps() > 0 && step_ % c.every_steps() == 0);
  if (!due) return absl::OkStatus();
  std::string path = engine::CheckpointPath(c.dir(), step_);
  RETURN_IF_ERROR(SaveCheckpoint(path));
  last_checkpoint_ = path;
  return engine::PruneCheckpoints(c.dir(), c.keep() > 0 ? c.keep() : 3);
}

absl::StatusOr<std::pair<double, double>> Trainer::Evaluate() {
  if (!test_) return std::make_pair(0.0, 0.0);
  int64_t bs = spec_.training().eval_batch_size() > 0 ? spec_.training().eval_batch_size()
                                                      : 500;
  data::SamplerOptions so;
  so.batch_size = bs;
  so.seed = spec_.training().seed();
  so.shuffle = false;
  data::PipelineOptions po;
  po.prefetch = 2;
  ASSIGN_OR_RETURN(auto pipe, data::Pipeline::Create(test_, so, spec_.data().transform(),
                                                     /*train=*/false, po));
  engine::LayerContext ctx;
  ctx.training = false;
  ctx.seed = spec_.training().seed();
  ctx.step = step_;
  double loss_sum = 0;
  int64_t correct = 0, n = 0;
  while (true) {
    ASSIGN_OR_RETURN(auto batch, pipe->Next());
    if (!batch.has_value()) break;
    if (batch->n == 0) continue;
    Replica& rep = *replicas_[0];
    ASSIGN_OR_RETURN(engine::Tensor logits, rep.model->Forward(BatchInput(*batch), ctx));
    ASSIGN_OR_RETURN(engine::LossResult r,
                     rep.loss->Compute(logits, BatchLabels(*batch), 0.0f, nullptr));
    loss_sum += r.loss_sum;
    correct += r.correct;
    n += batch->n;
    pipe->Recycle(std::move(*batch));
  }
  return std::make_pair(loss_sum / std::max<int64_t>(n, 1),
                        static_cast<double>(correct) / std::max<int64_t>(n, 1));
}

absl::Status Trainer::Connect(Replica& r) {
  collective::GlooOptions go;
  go.hostname = options_.hostname;
  go.connect_timeout = collective_timeout_;
  ASSIGN_OR_RETURN(auto comm, collective::CreateGlooCommunicator(group_store_.get(), r.rank,
                                                                 options_.world_size, go));
  collective::Communicator* c = comm.get();
  {
    absl::MutexLock l(&comm_mu_);
    r.comm = std::move(comm);
    if (aborted_) r.comm->Abort("another replica of this trainer failed");
  }
  // Every rank starts from global rank 0's parameters, state buffers and
  // optimizer state (identical already when every rank used the same seed or
  // checkpoint; the broadcast makes it a guarantee, once, before step 1).
  engine::ParamSet& ps = r.model->params();
  std::vector<std::pair<std::string, engine::Tensor>> tensors = {{"parameters", ps.flat_values()},
                                                         {"state buffers", ps.flat_state()}};
  for (auto& named : r.optimizer->State()) tensors.emplace_back("optimizer " + named.first, named.second);
  std::vector<std::unique_ptr<collective::Work>> works;
  for (auto& [name, t] : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    collective::Options o;
    o.timeout = collective_timeout_;
    o.tag = "initial " + name;
    works.push_back(c->Broadcast(FlatBuffer(t), /*root=*/0, o));
  }
  for (auto& w : works) RETURN_IF_ERROR(w->Wait());

  std::vector<collective::ParamRange> ranges;
  for (const auto& e : ps.entries()) ranges.push_back({e.offset, engine::NumElements(e.shape)});
  const v1::DistributionSpec& d = spec_.distribution();
  collective::ReducerOptions ro;
  if (d.first_bucket_mb() > 0) ro.first_bucket_bytes = static_cast<int64_t>(d.first_bucket_mb() * (1 << 20));
  if (d.bucket_cap_mb() > 0) ro.bucket_bytes = static_cast<int64_t>(d.bucket_cap_mb() * (1 << 20));
  ro.first_bucket_bytes = std::max<int64_t>(ro.first_bucket_bytes, 1);
  ro.bucket_bytes = std::max<int64_t>(ro.bucket_bytes, 1);
  if (d.gradient_compression() == "fp16") ro.wire = collective::DataType::kF16;
  if (d.gradient_compression() == "bf16") ro.wire = collective::DataType::kBF16;
  ro.timeout = collective_timeout_;
  ASSIGN_OR_RETURN(r.reducer, collective::Reducer::Create(c, FlatBuffer(ps.flat_grads()),
                                                          std::move(ranges), ro));
  if (d.sync_batch_norm()) r.sync_stats = std::make_unique<CommunicatorSum>(c, collective_timeout_);
  return absl::OkStatus();
}

void Trainer::AbortOthers(const Replica* failed, const absl::Status& why) {
  absl::MutexLock l(&comm_mu_);
  aborted_ = true;
  for (auto& r : replicas_) {
    if (r.get() != failed && r->comm) {
      r->comm->Abort(absl::StrCat("local replica ", failed->local, " (rank ", failed->rank,
                                  ") failed: ", why.message()));
    }
  }
}

absl::StatusOr<v1::TrainResult> Trainer::Run() {
  const auto wall_start = Clock::now();
  v1::TrainResult result;
  const engine::Model& model0 = *replicas_[0]->model;
  result.set_num_parameters(model0.params().num_parameters());
  result.set_device("cpu");
  result.set_threads(threads_ * options_.num_replicas);
  result.set_replicas(options_.world_size);
  if (options_.progress) {
    options_.progress->OnInfo(absl::StrFormat(
        "model: %d parameters, %.1f MFLOP per example (forward+backward); "
        "train %d examples, %s%d steps per epoch, %d threads",
        model0.params().num_parameters(), 6.0 * model0.ForwardMacsPerExample() / 1e6,
        train_->size(),
        test_ ? absl::StrCat("test ", test_->size(), " examples, ") : std::string(),
        steps_per_epoch_, threads_ * options_.num_replicas));
    if (distributed()) {
      options_.progress->OnInfo(absl::StrFormat(
          "data parallel: ranks %d..%d of %d in this process (%d threads each); global "
          "batch %d, about %d per replica",
          options_.first_rank, options_.first_rank + options_.num_replicas - 1,
          options_.world_size, threads_, spec_.training().batch_size(),
          spec_.training().batch_size() / options_.world_size));
    }
  }
  if (distributed() && !group_store_) {
    if (options_.store == nullptr) {
      owned_store_ = std::make_unique<collective::CoordinatorStore>(
          options_.coordinator, options_.job_id, options_.attempt);
    }
    // The data-parallel group's keys live under their own prefix, so the
    // store may be shared with other users (keys are never deleted).
    group_store_ = std::make_unique<collective::PrefixStore>(
        options_.store ? options_.store : owned_store_.get(), "data-parallel/");
  }

  // Local replicas 1.. run on their own threads, replica 0 on this one.
  std::vector<std::thread> threads;
  for (size_t i = 1; i < replicas_.size(); ++i) {
    threads.emplace_back([this, i] {
      Replica& r = *replicas_[i];
      engine::cpu::SetCpuThreads(threads_);  // this thread's own OpenMP pool
      r.status = RunLoop(r, nullptr);
      if (!r.status.ok()) AbortOthers(&r, r.status);
    });
  }
  Replica& lead = *replicas_[0];
  lead.status = RunLoop(lead, &result);
  if (!lead.status.ok()) AbortOthers(&lead, lead.status);
  for (auto& t : threads) t.join();
  // Report the root cause: the first replica to fail for a reason of its own,
  // not one aborted because a sibling failed.
  const absl::Status* first = nullptr;
  for (auto& r : replicas_) {
    if (r->status.ok()) continue;
    if (first == nullptr || (first->code() == absl::StatusCode::kAborted &&
                             r->status.code() != absl::StatusCode::kAborted)) {
      first = &r->status;
    }
  }
  if (first != nullptr) return *first;

  const bool root = options_.first_rank == 0;
  result.set_epochs(epoch_);
  result.set_steps(step_);
  result.set_train_seconds(train_seconds_);
  result.set_samples_per_second(samples_seen_ / std::max(train_seconds_, 1e-9));
  result.set_wall_seconds(Seconds(Clock::now() - wall_start));
  result.set_peak_memory_bytes(PeakRssBytes());
  result.set_checkpoint(last_checkpoint_);
  if (stop_.load() && options_.progress) {
    options_.progress->OnInfo(absl::StrCat("stopped at step ", step_, " on request"));
  }
  if (options_.progress) {
    if (root) {
      options_.progress->OnFinish(result);
    } else {
      options_.progress->OnInfo(absl::StrFormat(
          "ranks %d..%d done after %d steps (rank 0 reports the result)", options_.first_rank,
          options_.first_rank + options_.num_replicas - 1, step_));
    }
  }
  return result;
}

absl::Status Trainer::RunLoop(Replica& rep, v1::TrainResult* result) {
  const v1::TrainingSpec& tr = spec_.training();
  const bool lead = rep.local == 0;
  const bool root = rep.rank == 0;
  ProgressSink* progress = lead ? options_.progress : nullptr;
  engine::Model& model = *rep.model;
  if (distributed()) RETURN_IF_ERROR(Connect(rep));
  collective::Reducer* reducer = rep.reducer.get();

  // This replica's position; the lead mirrors it into the Trainer.
  int64_t step = step_, epoch = epoch_, step_in_epoch = step_in_epoch_;

  data::SamplerOptions so;
  so.batch_size = tr.batch_size();
  so.seed = tr.seed();
  so.shuffle = true;
  data::PipelineOptions po;
  po.prefetch = spec_.data().prefetch() > 0 ? spec_.data().prefetch() : 2;
  po.rank = rep.rank;
  po.world_size = options_.world_size;
  po.start_epoch = epoch;
  po.start_step = step_in_epoch;
  po.end_epoch = tr.epochs();

  std::unique_ptr<data::Pipeline> pipe;
  if (epoch < tr.epochs() && step < total_steps_) {
    ASSIGN_OR_RETURN(pipe, data::Pipeline::Create(train_, so, spec_.data().transform(),
                                                  /*train=*/true, po));
  }
  engine::Tensor dlogits;
  const engine::Model::GradReadyFn on_grad_ready =
      reducer ? engine::Model::GradReadyFn([reducer](int id) { reducer->MarkReady(id); }) : nullptr;
  const int log_every = tr.log_every_steps() > 0 ? tr.log_every_steps() : 100;
  // Per-epoch and per-log-window accumulators (this replica's samples), and
  // the samples of the whole job in the window (for throughput).
  double epoch_loss = 0, window_loss = 0, epoch_seconds = 0;
  int64_t epoch_correct = 0, epoch_n = 0, window_correct = 0, window_n = 0;
  int64_t epoch_global_n = 0, window_global_n = 0;
  double window_seconds = 0;

  while (pipe && step < total_steps_) {
    // Alone, a stop request ends the run before the next step; distributed,
    // it is voted on with the step's sample count, so every rank stops after
    // the same step.
    if (!reducer && stop_.load()) break;
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(auto batch, pipe->Next());
    if (!batch.has_value()) break;
    const int64_t n = batch->n;
    engine::LayerContext ctx;
    ctx.training = true;
    ctx.seed = tr.seed();
    ctx.step = step;
    ctx.replica = rep.rank;
    ctx.sync_stats = rep.sync_stats.get();
    if (reducer) RETURN_IF_ERROR(reducer->Prepare(n, stop_.load() ? 1 : 0));
    if (n > 0) {
      ASSIGN_OR_RETURN(engine::Tensor logits, model.Forward(BatchInput(*batch), ctx));
      if (!dlogits.defined() || dlogits.shape() != logits.shape()) {
        dlogits = engine::Tensor::Empty(logits.shape());
      }
      // Alone: the mean over the batch, folded into dlogits. Distributed: the
      // per-sample SUM; the reducer sums over ranks and the optimizer step
      // divides by the global count.
      const float loss_scale = reducer ? 1.0f : 1.0f / static_cast<float>(batch->global_n);
      ASSIGN_OR_RETURN(engine::LossResult r,
                       rep.loss->Compute(logits, BatchLabels(*batch), loss_scale, &dlogits));
      RETURN_IF_ERROR(model.Backward(dlogits, ctx, on_grad_ready));
      epoch_loss += r.loss_sum;
      window_loss += r.loss_sum;
      epoch_correct += r.correct;
      window_correct += r.correct;
    } else if (reducer) {
      // No samples on this rank this step (a short last batch): contribute
      // zero gradients, not the last step's.
      model.params().flat_grads().SetZero();
    }
    const float lr = schedule_->Lr(step);
    int64_t global_n = batch->global_n;
    bool stop_now = false;
    if (reducer) {
      ASSIGN_OR_RETURN(collective::StepTotals totals, reducer->Finish());
      global_n = totals.samples;
      stop_now = totals.stop_votes > 0;
      RETURN_IF_ERROR(rep.optimizer->Step(
          lr, 1.0f / static_cast<float>(std::max<int64_t>(global_n, 1))));
    } else {
      RETURN_IF_ERROR(rep.optimizer->Step(lr));
    }
    if (!std::isfinite(epoch_loss)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "training diverged: the loss became %f at step %d (epoch %d) on rank %d; try a "
          "smaller training.optimizer.lr (now %g)",
          epoch_loss, step, epoch + 1, rep.rank, tr.optimizer().lr()));
    }
    const bool last_in_epoch = batch->last_in_epoch;
    pipe->Recycle(std::move(*batch));
    ++step;
    ++step_in_epoch;
    epoch_n += n;
    window_n += n;
    epoch_global_n += global_n;
    window_global_n += global_n;
    const double dt = Seconds(Clock::now() - t0);
    epoch_seconds += dt;
    window_seconds += dt;
    if (lead) {
      step_ = step;
      epoch_ = epoch;
      step_in_epoch_ = step_in_epoch;
      samples_seen_ += global_n;
      train_seconds_ += dt;
    }

    if (progress && (step % log_every == 0 || last_in_epoch)) {
      v1::StepProgress p;
      p.set_step(step);
      p.set_total_steps(total_steps_);
      p.set_epoch(epoch);
      p.set_epochs(tr.epochs());
      p.set_step_in_epoch(step_in_epoch);
      p.set_steps_per_epoch(steps_per_epoch_);
      p.set_loss(window_loss / std::max<int64_t>(window_n, 1));
      p.set_accuracy(static_cast<double>(window_correct) / std::max<int64_t>(window_n, 1));
      double sps = window_global_n / std::max(window_seconds, 1e-9);
      p.set_samples_per_second(sps);
      p.set_eta_seconds((total_steps_ - step) * static_cast<double>(tr.batch_size()) /
                        std::max(sps, 1e-9));
      p.set_lr(lr);
      if (rep.comm) {
        p.set_collective_seq_issued(rep.comm->issued_seq());
        p.set_collective_seq_completed(rep.comm->completed_seq());
      }
      progress->OnStep(p);
      window_loss = 0;
      window_correct = window_n = window_global_n = 0;
      window_seconds = 0;
    }
    if (root) RETURN_IF_ERROR(MaybeCheckpoint(false));

    if (last_in_epoch) {
      ++epoch;
      step_in_epoch = 0;
      if (lead) {
        epoch_ = epoch;
        step_in_epoch_ = 0;
      }
      if (root) {
        v1::EpochResult e;
        e.set_epoch(epoch);
        e.set_train_loss(epoch_loss / std::max<int64_t>(epoch_n, 1));
        e.set_train_accuracy(static_cast<double>(epoch_correct) / std::max<int64_t>(epoch_n, 1));
        e.set_seconds(epoch_seconds);
        e.set_samples_per_second(epoch_global_n / std::max(epoch_seconds, 1e-9));
        ASSIGN_OR_RETURN(auto eval, Evaluate());
        e.set_test_loss(eval.first);
        e.set_test_accuracy(eval.second);
        *result->add_history() = e;
        if (progress) progress->OnEpoch(e);
        // An epoch-end checkpoint, unless the step cadence just wrote one.
        if (spec_.checkpoint().every_steps() <= 0 ||
            step % spec_.checkpoint().every_steps() != 0) {
          RETURN_IF_ERROR(MaybeCheckpoint(true));
        }
      }
      epoch_loss = 0;
      epoch_correct = epoch_n = epoch_global_n = 0;
      epoch_seconds = 0;
    }
    if (stop_now) break;
  }
  pipe.reset();
  if (!root) return absl::OkStatus();

  // Stopped mid-epoch (max_steps or a stop request): evaluate what we have
  // and checkpoint the exact position so `--resume` continues from it.
  if (step_in_epoch != 0 || result->history_size() == 0) {
    ASSIGN_OR_RETURN(auto eval, Evaluate());
    result->set_test_loss(eval.first);
    result->set_test_accuracy(eval.second);
    if (!spec_.checkpoint().dir().empty()) {
      std::string path = engine::CheckpointPath(spec_.checkpoint().dir(), step_);
      RETURN_IF_ERROR(SaveCheckpoint(path));
      last_checkpoint_ = path;
    }
  } else {
    const v1::EpochResult& last = result->history(result->history_size() - 1);
    result->set_test_loss(last.test_loss());
    result->set_test_accuracy(last.test_accuracy());
    result->set_train_loss(last.train_loss());
  }
  return absl::OkStatus();
}

}  // namespace yoke::worker
