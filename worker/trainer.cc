#include "worker/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_validate.h"
#include "common/status.h"
#include "data/open_dataset.h"
#include "data/pipeline.h"
#include "engine/checkpoint.h"
#include "engine/kernels/cpu/dnnl_context.h"

namespace yoke {
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

Tensor BatchInput(data::Batch& b) {
  return Tensor::Wrap(b.x.data(), b.x_shape(), DType::kF32);
}
Tensor BatchLabels(data::Batch& b) {
  return Tensor::Wrap(b.y.data(), {b.n}, DType::kI32);
}

}  // namespace

int64_t PeakRssBytes() {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

Trainer::~Trainer() = default;

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const v1::JobSpec& spec,
                                                         const TrainerOptions& options) {
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  std::unique_ptr<Trainer> t(new Trainer());
  t->spec_ = spec;
  t->options_ = options;
  const v1::TrainingSpec& tr = spec.training();
  if (spec.distribution().device() == "cuda") {
    return absl::UnimplementedError(
        "distribution.device: 'cuda' needs the CUDA backend, which this build does "
        "not have yet; use 'cpu'");
  }
  t->threads_ = cpu::SetCpuThreads(tr.threads());

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

  Shape input(t->train_->example_shape().begin(), t->train_->example_shape().end());
  ASSIGN_OR_RETURN(t->model_, Model::Create(spec.model(), input, classes));
  ASSIGN_OR_RETURN(t->loss_, CreateLoss(tr.loss().empty() ? "softmax_cross_entropy"
                                                          : tr.loss()));
  ASSIGN_OR_RETURN(t->optimizer_, CreateOptimizer(tr.optimizer(), &t->model_->params()));

  t->steps_per_epoch_ = (t->train_->size() + tr.batch_size() - 1) / tr.batch_size();
  t->total_steps_ = t->steps_per_epoch_ * tr.epochs();
  if (tr.max_steps() > 0) t->total_steps_ = std::min(t->total_steps_, tr.max_steps());
  ASSIGN_OR_RETURN(t->schedule_, CreateSchedule(tr.schedule(), tr.optimizer().lr(),
                                                t->total_steps_));

  t->model_->params().Initialize(tr.seed());
  if (!options.resume.empty()) RETURN_IF_ERROR(t->Restore(options.resume));
  if (!spec.checkpoint().dir().empty()) RETURN_IF_ERROR(MakeDirs(spec.checkpoint().dir()));
  return t;
}

absl::Status Trainer::SaveCheckpoint(const std::string& path) {
  v1::CheckpointHeader h;
  h.set_step(step_);
  h.set_epoch(epoch_);
  h.set_step_in_epoch(step_in_epoch_);
  h.set_seed(spec_.training().seed());
  *h.mutable_spec() = spec_;
  h.set_optimizer_step(optimizer_->step_count());
  h.set_world_size(1);
  h.set_wall_seconds(train_seconds_);
  h.set_samples_seen(samples_seen_);
  NamedTensors tensors = {{"params", model_->params().flat_values()},
                          {"state", model_->params().flat_state()}};
  for (auto& [name, t] : optimizer_->State()) tensors.emplace_back("optim/" + name, t);
  return WriteCheckpoint(path, h, tensors);
}

absl::Status Trainer::Restore(const std::string& path) {
  ASSIGN_OR_RETURN(Checkpoint ck, ReadCheckpoint(path));
  auto restore = [&](const std::string& name, const Tensor& dst) -> absl::Status {
    const Tensor* src = ck.Find(name);
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
  RETURN_IF_ERROR(restore("params", model_->params().flat_values()));
  RETURN_IF_ERROR(restore("state", model_->params().flat_state()));
  for (auto& [name, t] : optimizer_->State()) RETURN_IF_ERROR(restore("optim/" + name, t));
  optimizer_->set_step_count(ck.header.optimizer_step());
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
        "resumed from %s: step %d, epoch %d, batch %d of %d", path, step_, epoch_ + 1,
        step_in_epoch_, steps_per_epoch_));
  }
  return absl::OkStatus();
}

absl::Status Trainer::MaybeCheckpoint(bool end_of_epoch) {
  const v1::CheckpointSpec& c = spec_.checkpoint();
  if (c.dir().empty()) return absl::OkStatus();
  bool due = end_of_epoch || (c.every_steps() > 0 && step_ % c.every_steps() == 0);
  if (!due) return absl::OkStatus();
  std::string path = CheckpointPath(c.dir(), step_);
  RETURN_IF_ERROR(SaveCheckpoint(path));
  last_checkpoint_ = path;
  return PruneCheckpoints(c.dir(), c.keep() > 0 ? c.keep() : 3);
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
  LayerContext ctx;
  ctx.training = false;
  ctx.seed = spec_.training().seed();
  ctx.step = step_;
  double loss_sum = 0;
  int64_t correct = 0, n = 0;
  while (true) {
    ASSIGN_OR_RETURN(auto batch, pipe->Next());
    if (!batch.has_value()) break;
    if (batch->n == 0) continue;
    ASSIGN_OR_RETURN(Tensor logits, model_->Forward(BatchInput(*batch), ctx));
    ASSIGN_OR_RETURN(LossResult r, loss_->Compute(logits, BatchLabels(*batch), 0.0f, nullptr));
    loss_sum += r.loss_sum;
    correct += r.correct;
    n += batch->n;
    pipe->Recycle(std::move(*batch));
  }
  return std::make_pair(loss_sum / std::max<int64_t>(n, 1),
                        static_cast<double>(correct) / std::max<int64_t>(n, 1));
}

absl::StatusOr<v1::TrainResult> Trainer::Run() {
  const auto wall_start = Clock::now();
  const v1::TrainingSpec& tr = spec_.training();
  v1::TrainResult result;
  result.set_num_parameters(model_->params().num_parameters());
  result.set_device("cpu");
  result.set_threads(threads_);
  result.set_replicas(1);
  if (options_.progress) {
    options_.progress->OnInfo(absl::StrFormat(
        "model: %d parameters, %.1f MFLOP per example (forward+backward); "
        "train %d examples, %s%d steps per epoch, %d threads",
        model_->params().num_parameters(), 6.0 * model_->ForwardMacsPerExample() / 1e6,
        train_->size(),
        test_ ? absl::StrCat("test ", test_->size(), " examples, ") : std::string(),
        steps_per_epoch_, threads_));
  }

  data::SamplerOptions so;
  so.batch_size = tr.batch_size();
  so.seed = tr.seed();
  so.shuffle = true;
  data::PipelineOptions po;
  po.prefetch = spec_.data().prefetch() > 0 ? spec_.data().prefetch() : 2;
  po.start_epoch = epoch_;
  po.start_step = step_in_epoch_;
  po.end_epoch = tr.epochs();

  std::unique_ptr<data::Pipeline> pipe;
  if (epoch_ < tr.epochs() && step_ < total_steps_) {
    ASSIGN_OR_RETURN(pipe, data::Pipeline::Create(train_, so, spec_.data().transform(),
                                                  /*train=*/true, po));
  }
  Tensor dlogits;
  const int log_every = tr.log_every_steps() > 0 ? tr.log_every_steps() : 100;
  // Per-epoch and per-log-window accumulators.
  double epoch_loss = 0, window_loss = 0, epoch_seconds = 0;
  int64_t epoch_correct = 0, epoch_n = 0, window_correct = 0, window_n = 0;
  auto window_start = Clock::now();
  double window_seconds = 0;
  bool stopped = false;

  while (pipe && step_ < total_steps_) {
    if (stop_.load()) {
      stopped = true;
      break;
    }
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(auto batch, pipe->Next());
    if (!batch.has_value()) break;
    const int64_t n = batch->n;
    LayerContext ctx;
    ctx.training = true;
    ctx.seed = tr.seed();
    ctx.step = step_;
    ctx.replica = 0;
    if (n > 0) {
      ASSIGN_OR_RETURN(Tensor logits, model_->Forward(BatchInput(*batch), ctx));
      if (!dlogits.defined() || dlogits.shape() != logits.shape()) {
        dlogits = Tensor::Empty(logits.shape());
      }
      ASSIGN_OR_RETURN(LossResult r,
                       loss_->Compute(logits, BatchLabels(*batch),
                                      1.0f / static_cast<float>(batch->global_n), &dlogits));
      RETURN_IF_ERROR(model_->Backward(dlogits, ctx));
      epoch_loss += r.loss_sum;
      window_loss += r.loss_sum;
      epoch_correct += r.correct;
      window_correct += r.correct;
    }
    const float lr = schedule_->Lr(step_);
    RETURN_IF_ERROR(optimizer_->Step(lr));
    if (!std::isfinite(epoch_loss)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "training diverged: the loss became %f at step %d (epoch %d); try a smaller "
          "training.optimizer.lr (now %g)",
          epoch_loss, step_, epoch_ + 1, tr.optimizer().lr()));
    }
    const bool last_in_epoch = batch->last_in_epoch;
    pipe->Recycle(std::move(*batch));
    ++step_;
    ++step_in_epoch_;
    epoch_n += n;
    window_n += n;
    samples_seen_ += n;
    const double dt = Seconds(Clock::now() - t0);
    train_seconds_ += dt;
    epoch_seconds += dt;
    window_seconds += dt;

    if (options_.progress && (step_ % log_every == 0 || last_in_epoch)) {
      v1::StepProgress p;
      p.set_step(step_);
      p.set_total_steps(total_steps_);
      p.set_epoch(epoch_);
      p.set_epochs(tr.epochs());
      p.set_step_in_epoch(step_in_epoch_);
      p.set_steps_per_epoch(steps_per_epoch_);
      p.set_loss(window_loss / std::max<int64_t>(window_n, 1));
      p.set_accuracy(static_cast<double>(window_correct) / std::max<int64_t>(window_n, 1));
      double sps = window_n / std::max(window_seconds, 1e-9);
      p.set_samples_per_second(sps);
      p.set_eta_seconds((total_steps_ - step_) * static_cast<double>(tr.batch_size()) /
                        std::max(sps, 1e-9));
      p.set_lr(lr);
      options_.progress->OnStep(p);
      window_loss = 0;
      window_correct = window_n = 0;
      window_seconds = 0;
      window_start = Clock::now();
    }
    RETURN_IF_ERROR(MaybeCheckpoint(false));

    if (last_in_epoch) {
      v1::EpochResult e;
      e.set_epoch(epoch_ + 1);
      e.set_train_loss(epoch_loss / std::max<int64_t>(epoch_n, 1));
      e.set_train_accuracy(static_cast<double>(epoch_correct) / std::max<int64_t>(epoch_n, 1));
      e.set_seconds(epoch_seconds);
      e.set_samples_per_second(epoch_n / std::max(epoch_seconds, 1e-9));
      ++epoch_;
      step_in_epoch_ = 0;
      ASSIGN_OR_RETURN(auto eval, Evaluate());
      e.set_test_loss(eval.first);
      e.set_test_accuracy(eval.second);
      *result.add_history() = e;
      if (options_.progress) options_.progress->OnEpoch(e);
      // An epoch-end checkpoint, unless the step cadence just wrote one.
      if (spec_.checkpoint().every_steps() <= 0 ||
          step_ % spec_.checkpoint().every_steps() != 0) {
        RETURN_IF_ERROR(MaybeCheckpoint(true));
      }
      epoch_loss = 0;
      epoch_correct = epoch_n = 0;
      epoch_seconds = 0;
    }
  }
  pipe.reset();

  // Stopped mid-epoch (max_steps or a stop request): evaluate what we have
  // and checkpoint the exact position so `--resume` continues from it.
  if (step_in_epoch_ != 0 || result.history_size() == 0) {
    ASSIGN_OR_RETURN(auto eval, Evaluate());
    result.set_test_loss(eval.first);
    result.set_test_accuracy(eval.second);
    if (!spec_.checkpoint().dir().empty()) {
      std::string path = CheckpointPath(spec_.checkpoint().dir(), step_);
      RETURN_IF_ERROR(SaveCheckpoint(path));
      last_checkpoint_ = path;
    }
  } else {
    const v1::EpochResult& last = result.history(result.history_size() - 1);
    result.set_test_loss(last.test_loss());
    result.set_test_accuracy(last.test_accuracy());
    result.set_train_loss(last.train_loss());
  }
  result.set_epochs(epoch_);
  result.set_steps(step_);
  result.set_train_seconds(train_seconds_);
  result.set_samples_per_second(samples_seen_ / std::max(train_seconds_, 1e-9));
  result.set_wall_seconds(Seconds(Clock::now() - wall_start));
  result.set_peak_memory_bytes(PeakRssBytes());
  result.set_checkpoint(last_checkpoint_);
  if (stopped && options_.progress) {
    options_.progress->OnInfo(absl::StrCat("stopped at step ", step_, " on request"));
  }
  if (options_.progress) options_.progress->OnFinish(result);
  return result;
}

}  // namespace yoke
