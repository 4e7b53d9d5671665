// Trainer::Run: the replicas' threads and the step loop (RunLoop, its
// setup and one step), and the gradient accumulator. The epoch end and the
// run's end are in trainer_epoch.cc.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/coordinator_store.h"
#include "common/rng.h"
#include "common/status.h"
#include "data/pipeline.h"
#include "engine/checkpoint.h"
#include "engine/kernels/cpu/dnnl_context.h"
#include "spdlog/spdlog.h"
#include "telemetry/train_metrics.h"
#include "trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace yoke::worker {

using trainer_internal::Clock;
using trainer_internal::OnDevice;
using trainer_internal::Seconds;

namespace {

// engine::GradNorm on the CPU, or the device backend's on a device.
absl::StatusOr<double> DeviceGradNorm(const engine::ParamSet& ps, float grad_scale) {
  const engine::Device d = ps.flat_grads().device();
  if (d.is_cpu()) return engine::GradNorm(ps, grad_scale);
  ASSIGN_OR_RETURN(engine::DeviceBackend * backend, engine::BackendFor(d));
  return backend->GradNorm(ps, grad_scale);
}

}  // namespace

absl::StatusOr<v1::TrainResult> Trainer::Run() {
  const auto wall_start = Clock::now();
  v1::TrainResult result;
  result.set_num_parameters(model_parameters());
  result.set_device(device_.is_cpu() ? "cpu" : "cuda");
  result.set_threads(threads_ * options_.num_replicas);
  result.set_replicas(options_.world_size - ps_tasks_);  // PS tasks are no replicas
  // A restart after early stopping already ended the run trains no further.
  stopped_before_ = EarlyStopping().stop;
  // Epochs restored from a checkpoint open the result's history.
  *result.mutable_history() = history_;
  ReportStart();
  OpenEventFile();
  if (distributed() && !group_store_) {
    if (options_.store == nullptr) {
      // TLS and the attempt's secret, as the worker daemon handed them over.
      auto store_options = collective::CoordinatorStoreOptions::FromEnvironment();
      if (!store_options.ok()) return store_options.status();
      owned_store_ = std::make_unique<collective::CoordinatorStore>(
          options_.coordinator, options_.job_id, options_.attempt, *store_options);
    }
    // The data-parallel group's keys live under their own prefix, so the
    // store may be shared with other users (keys are never deleted).
    group_store_ = std::make_unique<collective::PrefixStore>(
        options_.store ? options_.store : owned_store_.get(), "data-parallel/");
    ps_store_ = std::make_unique<collective::PrefixStore>(
        options_.store ? options_.store : owned_store_.get(), "parameter-servers/");
  }

  // Local replicas 1.. run on their own threads, replica 0 on this one.
  std::vector<std::thread> threads;
  for (size_t i = 1; i < replicas_.size(); ++i) {
    threads.emplace_back([this, i] {
      Replica& r = *replicas_[i];
      engine::cpu::SetCpuThreads(threads_);  // this thread's own OpenMP pool
      r.status = r.ps_task ? RunPsTask(r) : RunLoop(r, nullptr);
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

  result.set_epochs(epoch_);
  result.set_steps(step_);
  result.set_train_seconds(train_seconds_);
  result.set_samples_per_second(samples_seen_ / std::max(train_seconds_, 1e-9));
  result.set_wall_seconds(Seconds(Clock::now() - wall_start));
  result.set_peak_memory_bytes(PeakRssBytes());
  result.set_checkpoint(last_checkpoint_);
  const EarlyStop es = EarlyStopping();
  result.set_best_epoch(es.best_epoch);
  result.set_stopped_early(es.stop && epoch_ < spec_.training().epochs() && step_ < total_steps_);
  result.set_best_checkpoint(best_checkpoint_);
  ReportEnd(result);
  return result;
}

// The outline of one replica's run; each part's contract is in trainer.h.
absl::Status Trainer::RunLoop(Replica& rep, v1::TrainResult* result) {
  if (distributed()) {
    RETURN_IF_ERROR(pipelined() ? ConnectPipeline(rep) : ps_job() ? ConnectPs(rep) : Connect(rep));
  }
  LoopState s(rep, std::max(spec_.training().accumulation_steps(), 1));
  RETURN_IF_ERROR(StartLoop(s));
  const int log_every =
      spec_.training().log_every_steps() > 0 ? spec_.training().log_every_steps() : 100;

  while (s.pipe && s.step < total_steps_) {
    // Alone, a stop request ends the run before the next step; distributed,
    // it is voted on with the step's sample count (StopVote), so every rank
    // stops after the same step.
    if (!s.reducer && !pipelined() && stop_.load()) break;
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(auto batch, s.pipe->Next());
    if (!batch.has_value()) break;
    s.window.data_wait += Seconds(Clock::now() - t0);
    ASSIGN_OR_RETURN(const StepOutcome out,
                     pipelined() ? PipelineStep(s, *batch) : TrainStep(s, *batch));
    // A pipeline's sums are the job's (PipelineStep shares them).
    const int64_t n = pipelined() ? out.global_n : batch->n;
    const bool last_in_epoch = batch->last_in_epoch;
    s.pipe->Recycle(std::move(*batch));
    EndStep(s, n, out.global_n, Seconds(Clock::now() - t0));
    RETURN_IF_ERROR(MaybeDepart(s));

    if ((s.progress || (s.root && events_)) && (s.step % log_every == 0 || last_in_epoch)) {
      ReportWindow(s, out.lr);
    }
    RETURN_IF_ERROR(MaybeCheckpoint(s, false));
    if (last_in_epoch) RETURN_IF_ERROR(EndEpoch(s, result));
    if (out.stop_voted || s.early_stop) break;
  }
  // A device runs behind the host: the last steps' work (and any fault in
  // it) is waited for here, not lost.
  RETURN_IF_ERROR(engine::SynchronizeDevice(rep.device));
  s.pipe.reset();
  // A PS job's stop checkpoint needs the PS tasks: the chief writes it
  // before the replicas leave them.
  if (ps_job() && (s.step_in_epoch != 0 || s.epoch == 0)) RETURN_IF_ERROR(SaveStopCheckpoint(s));
  // The PS tasks stop waiting for this replica (evaluation needs none).
  if (rep.ps_client) RETURN_IF_ERROR(rep.ps_client->Leave());
  // A pipeline's evaluation needs every rank: a run stopped mid-epoch (or
  // before its first) is evaluated here, as FinishRun reports it.
  // Its stop checkpoint, too, is written by all the stages together.
  if (pipelined() && (s.step_in_epoch != 0 || s.epoch == 0)) {
    RETURN_IF_ERROR(PipelineEvaluate(rep));
    RETURN_IF_ERROR(SaveStopCheckpoint(s));
  }

  LeaveGroup(rep);
  if (!s.root) return absl::OkStatus();
  return FinishRun(s, result);
}

absl::Status Trainer::StartLoop(LoopState& s) {
  const v1::TrainingSpec& tr = spec_.training();
  s.lead = s.rep.local == 0;
  s.root = s.rep.rank == 0;
  s.progress = s.lead ? options_.progress : nullptr;
  s.step = step_;
  s.epoch = epoch_;
  s.step_in_epoch = step_in_epoch_;
  if (s.rep.rejoin_step >= 0) {  // a PS replica restarted while the others went on
    s.step = s.rep.rejoin_step;
    s.epoch = s.step / steps_per_epoch_;
    s.step_in_epoch = s.step % steps_per_epoch_;
    if (s.lead) {
      step_ = s.step;
      epoch_ = s.epoch;
      step_in_epoch_ = s.step_in_epoch;
    }
  }

  data::SamplerOptions so;
  so.batch_size = tr.batch_size();
  so.seed = tr.seed();
  so.shuffle = true;
  data::PipelineOptions po;
  po.prefetch = spec_.data().prefetch() > 0 ? spec_.data().prefetch() : 2;
  // Every stage of a pipeline reads the same slice: the first its inputs,
  // the last its labels.
  po.rank = pipelined() ? s.rep.pipeline : s.rep.rank;
  po.world_size = data_parallel_ranks();
  po.start_epoch = s.epoch;
  po.start_step = s.step_in_epoch;
  po.end_epoch = tr.epochs();
  po.labels_only = ReadsLabelsOnly(s.rep, *train_);
  if (s.epoch < tr.epochs() && s.step < total_steps_ && !stopped_before_) {
    ASSIGN_OR_RETURN(s.pipe, data::Pipeline::Create(train_, so, spec_.data().transform(),
                                                    /*train=*/true, po));
  }
  return s.accum.Init();
}

absl::StatusOr<Trainer::StepOutcome> Trainer::TrainStep(LoopState& s, data::Batch& batch) {
  const v1::TrainingSpec& tr = spec_.training();
  engine::Model& model = *s.rep.model;
  const int64_t n = batch.n;
  if (s.reducer) RETURN_IF_ERROR(s.reducer->Prepare(n, StopVote()));
  if (s.rep.ps_client) {
    // Its shards go out during backward: a straggler is late before it.
    if (options_.straggler_probability > 0) Straggle(s, s.last_compute);
    RETURN_IF_ERROR(BeginPsStep(s, n));
  }
  double step_loss = 0;
  const auto compute_start = Clock::now();
  if (n > 0) {
    ASSIGN_OR_RETURN(step_loss, ForwardBackward(s, batch));
    s.last_compute = Seconds(Clock::now() - compute_start);
    if (options_.straggler_probability > 0 && !s.rep.ps_client) Straggle(s, s.last_compute);
  } else if (s.reducer || s.rep.ps_client) {
    // No samples on this rank this step (a short last batch): contribute
    // zero gradients, not the last step's.
    model.params().flat_grads().SetZero();
  }
  StepOutcome out;
  out.lr = schedule_->Lr(s.step);
  out.global_n = batch.global_n;
  if (s.reducer) {
    const auto finish_start = Clock::now();
    ASSIGN_OR_RETURN(collective::StepTotals totals, s.reducer->Finish());
    s.window.exposed += Seconds(Clock::now() - finish_start);
    s.window.comm += totals.comm_seconds;
    out.global_n = totals.samples;
    out.stop_voted = totals.stop_votes > 0;
  }
  // The mean gradient is grad_scale * flat_grads (alone, the 1 / batch is
  // already in dlogits); clipping multiplies the scale, identically on
  // every rank as they hold the same allreduced sums.
  float grad_scale =
      s.reducer ? 1.0f / static_cast<float>(std::max<int64_t>(out.global_n, 1)) : 1.0f;
  const float clip = tr.clip_grad_norm();
  if (clip > 0) {
    ASSIGN_OR_RETURN(const double norm, DeviceGradNorm(model.params(), grad_scale));
    s.window.grad_norm += norm;
    grad_scale *= engine::ClipFactor(norm, clip);
  }
  // A parameter-server replica's update happens on the PS tasks: it gets
  // the values back instead.
  if (s.rep.ps_client) {
    RETURN_IF_ERROR(FinishPsStep(s));
  } else {
    RETURN_IF_ERROR(s.rep.optimizer->Step(out.lr, grad_scale));
  }
  if (!std::isfinite(s.epoch_sums.loss)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "training diverged: the loss became %f at step %d (epoch %d) on rank %d; try a "
        "smaller training.optimizer.lr (now %g)",
        s.epoch_sums.loss, s.step, s.epoch + 1, s.rep.rank, tr.optimizer().lr()));
  }
  if (s.lead && options_.on_step) {
    TrainerOptions::StepRecord rec;
    rec.step = s.step;
    rec.indices = &batch.indices;
    rec.mean_loss = step_loss / static_cast<double>(std::max<int64_t>(n, 1));
    rec.params = &model.params();
    rec.optimizer = s.rep.optimizer.get();
    options_.on_step(rec);
  }
  return out;
}

void Trainer::Straggle(const LoopState& s, double compute_seconds) const {
  common::Philox rng(spec_.training().seed() ^ 0x5354524147ULL,
                     (static_cast<uint64_t>(s.rep.rank) << 40) + static_cast<uint64_t>(s.step));
  if (rng.NextFloat() >= options_.straggler_probability) return;
  const double extra = (options_.straggler_factor - 1) * compute_seconds;
  if (extra > 0) std::this_thread::sleep_for(std::chrono::duration<double>(extra));
}

absl::StatusOr<double> Trainer::ForwardBackward(LoopState& s, data::Batch& batch) {
  const v1::TrainingSpec& tr = spec_.training();
  engine::Model& model = *s.rep.model;
  engine::LayerContext ctx;
  ctx.training = true;
  ctx.seed = tr.seed();
  ctx.step = s.step;
  ctx.replica = s.rep.rank;
  ctx.sync_stats = s.rep.sync_stats.get();
  // Alone: the mean over the batch, folded into dlogits. Distributed: the
  // per-sample SUM; the reducer sums over ranks and the optimizer step
  // divides by the global count. Either way the scale spans the whole
  // step, so k micro-batches add up to the step's mean gradient.
  const float loss_scale =
      s.reducer || s.rep.ps_client ? 1.0f : 1.0f / static_cast<float>(batch.global_n);
  const int64_t n = batch.n;
  const int64_t k = s.accum.k();
  const int64_t micro = (n + k - 1) / k;
  const int64_t example_numel = train_->example_numel();
  double step_loss = 0;
  s.accum.BeginStep();
  for (int64_t begin = 0, j = 0; begin < n; begin += micro, ++j) {
    const int64_t m = std::min(micro, n - begin);
    const bool last_micro = begin + m >= n;
    ctx.step = s.step * k + j;  // dropout masks: a stream per micro-batch
    engine::Shape x_shape{m};
    x_shape.insert(x_shape.end(), batch.example_shape.begin(), batch.example_shape.end());
    ASSIGN_OR_RETURN(engine::Tensor x,
                     OnDevice(engine::Tensor::Wrap(batch.x.data() + begin * example_numel, x_shape,
                                                   engine::DType::kF32),
                              s.rep.device, &s.rep.x_dev, "the batch's input"));
    ASSIGN_OR_RETURN(engine::Tensor y, OnDevice(engine::Tensor::Wrap(batch.y.data() + begin, {m},
                                                                     engine::DType::kI32),
                                                s.rep.device, &s.rep.y_dev, "the batch's labels"));
    ASSIGN_OR_RETURN(engine::Tensor logits, model.Forward(x, ctx));
    if (!s.dlogits.defined() || s.dlogits.shape() != logits.shape()) {
      ASSIGN_OR_RETURN(s.dlogits,
                       engine::Tensor::Allocate(logits.shape(), engine::DType::kF32, s.rep.device,
                                                "the loss gradient (dlogits)"));
    }
    ASSIGN_OR_RETURN(engine::LossResult r, s.rep.loss->Compute(logits, y, loss_scale, &s.dlogits));
    if (last_micro) {
      RETURN_IF_ERROR(s.accum.BackwardLast(s.dlogits, ctx));
    } else {
      RETURN_IF_ERROR(s.accum.Backward(s.dlogits, ctx));
    }
    step_loss += r.loss_sum;
    s.epoch_sums.loss += r.loss_sum;
    s.window.loss += r.loss_sum;
    s.epoch_sums.correct += r.correct;
    s.window.correct += r.correct;
  }
  return step_loss;
}

void Trainer::EndStep(LoopState& s, int64_t n, int64_t global_n, double seconds) {
  ++s.step;
  ++s.step_in_epoch;
  s.epoch_sums.n += n;
  s.window.n += n;
  s.epoch_sums.global_n += global_n;
  s.window.global_n += global_n;
  s.epoch_sums.seconds += seconds;
  s.window.seconds += seconds;
  common::CountStepSeconds(seconds, &s.window.histogram);
  if (s.lead) {
    step_ = s.step;
    epoch_ = s.epoch;
    step_in_epoch_ = s.step_in_epoch;
    samples_seen_ += global_n;
    train_seconds_ += seconds;
  }
}

namespace trainer_internal {

GradAccumulator::GradAccumulator(engine::Model& model, int64_t k, collective::Reducer* reducer,
                                 ps::PsClient* ps)
    : model_(model), k_(k), reducer_(reducer), ps_(ps), added_(model.params().entries().size(), 0) {
  if (reducer_) on_ready_ = [this](int id) { reducer_->MarkReady(id); };
  if (ps_) on_ready_ = [this](int id) { ps_->MarkReady(id); };
  last_ready_ = [this](int id) {
    if (have_sum_) AddSum(id);
    if (reducer_) reducer_->MarkReady(id);
    if (ps_) ps_->MarkReady(id);
  };
}

absl::Status GradAccumulator::Init() {
  if (k_ <= 1) return absl::OkStatus();
  ASSIGN_OR_RETURN(sum_, engine::Tensor::AllocateZeros(model_.params().flat_grads().shape(),
                                                       engine::DType::kF32, engine::Device::CPU(),
                                                       "the gradient accumulation buffer"));
  return absl::OkStatus();
}

void GradAccumulator::AddSum(int id) {
  engine::ParamSet& ps = model_.params();
  const engine::ParamSet::Entry& e = ps.entries()[id];
  float* __restrict g = ps.flat_grads().data<float>() + e.offset;
  const float* __restrict a = sum_.data<float>() + e.offset;
  const int64_t count = engine::NumElements(e.shape);
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) g[i] += a[i];
  added_[id] = 1;
}

absl::Status GradAccumulator::Backward(const engine::Tensor& dlogits,
                                       const engine::LayerContext& ctx) {
  RETURN_IF_ERROR(model_.Backward(dlogits, ctx));
  const float* const grads = model_.params().flat_grads().data<float>();
  float* __restrict a = sum_.data<float>();
  const int64_t total = sum_.numel();
  if (!have_sum_) {
    std::copy(grads, grads + total, a);
  } else {
#pragma omp parallel for simd if (total > 32768)
    for (int64_t i = 0; i < total; ++i) a[i] += grads[i];
  }
  have_sum_ = true;
  return absl::OkStatus();
}

absl::Status GradAccumulator::BackwardLast(const engine::Tensor& dlogits,
                                           const engine::LayerContext& ctx) {
  std::fill(added_.begin(), added_.end(), 0);
  RETURN_IF_ERROR(model_.Backward(dlogits, ctx, k_ > 1 ? last_ready_ : on_ready_));
  // A parameter backward never reported (none today) still gets its sum
  // before Finish issues its bucket.
  if (have_sum_) {
    for (size_t id = 0; id < added_.size(); ++id) {
      if (!added_[id]) AddSum(static_cast<int>(id));
    }
  }
  return absl::OkStatus();
}

}  // namespace trainer_internal

}  // namespace yoke::worker
