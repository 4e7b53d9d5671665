// Trainer::Run: the replicas' threads and the step loop (RunLoop).
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/coordinator_store.h"
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
using trainer_internal::Seconds;

absl::StatusOr<v1::TrainResult> Trainer::Run() {
  const auto wall_start = Clock::now();
  v1::TrainResult result;
  const engine::Model& model0 = *replicas_[0]->model;
  result.set_num_parameters(model0.params().num_parameters());
  result.set_device("cpu");
  result.set_threads(threads_ * options_.num_replicas);
  result.set_replicas(options_.world_size);
  // A restart after early stopping already ended the run trains no further.
  stopped_before_ = EarlyStopping().stop;
  // Epochs restored from a checkpoint open the result's history.
  *result.mutable_history() = {history_.begin(), history_.end()};
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
  if (epoch < tr.epochs() && step < total_steps_ && !stopped_before_) {
    ASSIGN_OR_RETURN(pipe, data::Pipeline::Create(train_, so, spec_.data().transform(),
                                                  /*train=*/true, po));
  }
  engine::Tensor dlogits;
  const engine::Model::GradReadyFn on_grad_ready =
      reducer ? engine::Model::GradReadyFn([reducer](int id) { reducer->MarkReady(id); }) : nullptr;

  // Gradient accumulation over k micro-batches (see the header): the sum of
  // the first k-1 micro-batches' gradients, added back parameter by
  // parameter during the last one's backward, before the reducer sees it.
  const int64_t k = std::max(tr.accumulation_steps(), 1);
  engine::ParamSet& ps = model.params();
  const float* const grads = ps.flat_grads().data<float>();
  engine::Tensor grad_sum;  // (padded_size,), like flat_grads
  std::vector<char> added(ps.entries().size(), 0);
  bool have_sum = false;  // grad_sum holds this step's earlier micro-batches
  auto add_sum = [&](int id) {
    const engine::ParamSet::Entry& e = ps.entries()[id];
    float* __restrict g = ps.flat_grads().data<float>() + e.offset;
    const float* __restrict a = grad_sum.data<float>() + e.offset;
    const int64_t count = engine::NumElements(e.shape);
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) g[i] += a[i];
    added[id] = 1;
  };
  if (k > 1) {
    ASSIGN_OR_RETURN(grad_sum, engine::Tensor::AllocateZeros(
                                   ps.flat_grads().shape(), engine::DType::kF32,
                                   engine::Device::CPU(), "the gradient accumulation buffer"));
  }
  const engine::Model::GradReadyFn last_micro_ready = [&](int id) {
    if (have_sum) add_sum(id);
    if (reducer) reducer->MarkReady(id);
  };
  const int64_t example_numel = train_->example_numel();
  const bool early_stopping = !tr.early_stopping().monitor().empty();
  const float clip = tr.clip_grad_norm();
  bool early_stop = false;
  const int log_every = tr.log_every_steps() > 0 ? tr.log_every_steps() : 100;
  // Per-epoch and per-log-window accumulators (this replica's samples), and
  // the samples of the whole job in the window (for throughput).
  double epoch_loss = 0, window_loss = 0, epoch_seconds = 0;
  int64_t epoch_correct = 0, epoch_n = 0, window_correct = 0, window_n = 0;
  int64_t epoch_global_n = 0, window_global_n = 0;
  double window_seconds = 0;
  // Where the window's time went (v1::StepProgress fields 14-19).
  double window_data_wait = 0, window_comm = 0, window_exposed = 0, window_grad_norm = 0;
  google::protobuf::RepeatedField<int64_t> window_histogram;

  while (pipe && step < total_steps_) {
    // Alone, a stop request ends the run before the next step; distributed,
    // it is voted on with the step's sample count, so every rank stops after
    // the same step.
    if (!reducer && stop_.load()) break;
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(auto batch, pipe->Next());
    if (!batch.has_value()) break;
    window_data_wait += Seconds(Clock::now() - t0);
    const int64_t n = batch->n;
    engine::LayerContext ctx;
    ctx.training = true;
    ctx.seed = tr.seed();
    ctx.step = step;
    ctx.replica = rep.rank;
    ctx.sync_stats = rep.sync_stats.get();
    if (reducer) RETURN_IF_ERROR(reducer->Prepare(n, stop_.load() ? 1 : 0));
    double step_loss = 0;
    if (n > 0) {
      // Alone: the mean over the batch, folded into dlogits. Distributed: the
      // per-sample SUM; the reducer sums over ranks and the optimizer step
      // divides by the global count. Either way the scale spans the whole
      // step, so k micro-batches add up to the step's mean gradient.
      const float loss_scale = reducer ? 1.0f : 1.0f / static_cast<float>(batch->global_n);
      const int64_t micro = (n + k - 1) / k;
      have_sum = false;
      for (int64_t begin = 0, j = 0; begin < n; begin += micro, ++j) {
        const int64_t m = std::min(micro, n - begin);
        const bool last_micro = begin + m >= n;
        ctx.step = step * k + j;  // dropout masks: a stream per micro-batch
        engine::Shape x_shape{m};
        x_shape.insert(x_shape.end(), batch->example_shape.begin(), batch->example_shape.end());
        engine::Tensor x = engine::Tensor::Wrap(batch->x.data() + begin * example_numel, x_shape,
                                                engine::DType::kF32);
        engine::Tensor y = engine::Tensor::Wrap(batch->y.data() + begin, {m}, engine::DType::kI32);
        ASSIGN_OR_RETURN(engine::Tensor logits, model.Forward(x, ctx));
        if (!dlogits.defined() || dlogits.shape() != logits.shape()) {
          ASSIGN_OR_RETURN(dlogits, engine::Tensor::Allocate(logits.shape(), engine::DType::kF32,
                                                             engine::Device::CPU(),
                                                             "the loss gradient (dlogits)"));
        }
        ASSIGN_OR_RETURN(engine::LossResult r, rep.loss->Compute(logits, y, loss_scale, &dlogits));
        if (last_micro) {
          std::fill(added.begin(), added.end(), 0);
          RETURN_IF_ERROR(model.Backward(dlogits, ctx, k > 1 ? last_micro_ready : on_grad_ready));
          // A parameter backward never reported (none today) still gets its
          // sum before Finish issues its bucket.
          if (have_sum) {
            for (size_t id = 0; id < added.size(); ++id) {
              if (!added[id]) add_sum(static_cast<int>(id));
            }
          }
        } else {
          // No communication for the first k-1 micro-batches.
          RETURN_IF_ERROR(model.Backward(dlogits, ctx));
          float* __restrict a = grad_sum.data<float>();
          const int64_t total = grad_sum.numel();
          if (!have_sum) {
            std::copy(grads, grads + total, a);
          } else {
#pragma omp parallel for simd if (total > 32768)
            for (int64_t i = 0; i < total; ++i) a[i] += grads[i];
          }
          have_sum = true;
        }
        step_loss += r.loss_sum;
        epoch_loss += r.loss_sum;
        window_loss += r.loss_sum;
        epoch_correct += r.correct;
        window_correct += r.correct;
      }
    } else if (reducer) {
      // No samples on this rank this step (a short last batch): contribute
      // zero gradients, not the last step's.
      model.params().flat_grads().SetZero();
    }
    const float lr = schedule_->Lr(step);
    int64_t global_n = batch->global_n;
    bool stop_now = false;
    if (reducer) {
      const auto finish_start = Clock::now();
      ASSIGN_OR_RETURN(collective::StepTotals totals, reducer->Finish());
      window_exposed += Seconds(Clock::now() - finish_start);
      window_comm += totals.comm_seconds;
      global_n = totals.samples;
      stop_now = totals.stop_votes > 0;
    }
    // The mean gradient is grad_scale * flat_grads (alone, the 1 / batch is
    // already in dlogits); clipping multiplies the scale, identically on
    // every rank as they hold the same allreduced sums.
    float grad_scale = reducer ? 1.0f / static_cast<float>(std::max<int64_t>(global_n, 1)) : 1.0f;
    if (clip > 0) {
      const double norm = engine::GradNorm(ps, grad_scale);
      window_grad_norm += norm;
      grad_scale *= engine::ClipFactor(norm, clip);
    }
    RETURN_IF_ERROR(rep.optimizer->Step(lr, grad_scale));
    if (!std::isfinite(epoch_loss)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "training diverged: the loss became %f at step %d (epoch %d) on rank %d; try a "
          "smaller training.optimizer.lr (now %g)",
          epoch_loss, step, epoch + 1, rep.rank, tr.optimizer().lr()));
    }
    if (lead && options_.on_step) {
      TrainerOptions::StepRecord rec;
      rec.step = step;
      rec.indices = &batch->indices;
      rec.mean_loss = step_loss / static_cast<double>(std::max<int64_t>(n, 1));
      rec.params = &model.params();
      rec.optimizer = rep.optimizer.get();
      options_.on_step(rec);
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
    common::CountStepSeconds(dt, &window_histogram);
    if (lead) {
      step_ = step;
      epoch_ = epoch;
      step_in_epoch_ = step_in_epoch;
      samples_seen_ += global_n;
      train_seconds_ += dt;
    }

    if ((progress || (root && events_)) && (step % log_every == 0 || last_in_epoch)) {
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
      int64_t window_steps = 0;
      for (int64_t c : window_histogram) window_steps += c;
      p.set_window_steps(window_steps);
      p.set_step_seconds(window_seconds);
      p.set_data_wait_seconds(window_data_wait);
      p.set_allreduce_seconds(window_comm);
      p.set_allreduce_exposed_seconds(window_exposed);
      if (clip > 0) p.set_grad_norm(window_grad_norm / std::max<int64_t>(window_steps, 1));
      *p.mutable_step_seconds_histogram() = window_histogram;
      if (progress) progress->OnStep(p);
      if (root) WriteStepEvents(p);
      window_loss = 0;
      window_correct = window_n = window_global_n = 0;
      window_seconds = window_data_wait = window_comm = window_exposed = window_grad_norm = 0;
      window_histogram.Clear();
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
        if (validation_) {
          ASSIGN_OR_RETURN(auto val, EvaluateValidation());
          e.set_validation_loss(val.first);
          e.set_validation_accuracy(val.second);
        }
        *result->add_history() = e;
        history_.push_back(e);
        if (progress) progress->OnEpoch(e);
        WriteEpochEvents(step, e);
        // An epoch-end checkpoint, unless the step cadence just wrote one.
        if (spec_.checkpoint().every_steps() <= 0 || step % spec_.checkpoint().every_steps() != 0) {
          RETURN_IF_ERROR(MaybeCheckpoint(true));
        }
        if (early_stopping) {
          const EarlyStop es = EarlyStopping();
          if (spec_.checkpoint().keep_best() && es.best_epoch == e.epoch()) {
            // Atomic (WriteCheckpoint renames a finished file into place),
            // and not named ckpt-*.yoke, so `keep` never prunes it and a
            // restart never resumes from it.
            const std::string best = spec_.checkpoint().dir() + "/best.ckpt";
            RETURN_IF_ERROR(SaveCheckpoint(best));
            best_checkpoint_ = best;
          }
          early_stop = es.stop;
        }
      }
      // Rank 0 alone evaluated: its decision reaches every rank before any
      // starts the next step, so all stop after this one.
      if (early_stopping && rep.comm) {
        int64_t flag = early_stop ? 1 : 0;
        collective::Buffer b;
        b.data = &flag;
        b.count = 1;
        b.dtype = collective::DataType::kI64;
        collective::Options o;
        o.timeout = collective_timeout_;
        o.tag = "early stopping";
        RETURN_IF_ERROR(rep.comm->Broadcast(b, /*root=*/0, o)->Wait());
        early_stop = flag != 0;
      }
      epoch_loss = 0;
      epoch_correct = epoch_n = epoch_global_n = 0;
      epoch_seconds = 0;
    }
    if (stop_now || early_stop) break;
  }
  pipe.reset();
  // Every rank leaves the group before it closes its connections: a rank
  // that exits right after the last allreduce could otherwise fail a peer
  // still finishing it ("Connection closed by peer", seen between Docker
  // containers). Not a collective, so a rank that stopped early mismatches
  // no op; it waits here until its peers fail or leave. Training is done, so
  // a failure here (a peer's own, which that peer reports) is only logged.
  if (rep.comm != nullptr && rep.comm->size() > 1) {
    if (absl::Status s = rep.comm->Leave(collective_timeout_); !s.ok()) {
      spdlog::warn("rank {}: leaving the communicator: {}", rep.rank, s.ToString());
    }
  }
  if (!root) return absl::OkStatus();

  // Stopped mid-epoch (max_steps or a stop request): evaluate what we have
  // and checkpoint the exact position so `--resume` continues from it.
  if (step_in_epoch != 0 || result->history_size() == 0) {
    ASSIGN_OR_RETURN(auto eval, Evaluate());
    result->set_test_loss(eval.first);
    result->set_test_accuracy(eval.second);
    // The training loss of the partial epoch (it was 0 when a run stopped
    // before its first epoch ended).
    if (epoch_n > 0) result->set_train_loss(epoch_loss / epoch_n);
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
