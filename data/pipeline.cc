#include "data/pipeline.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/usable_cores.h"

namespace yoke::data {

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(std::shared_ptr<const Dataset> dataset,
                                                           const SamplerOptions& sampler_options,
                                                           const v1::TransformSpec& transform_spec,
                                                           bool train,
                                                           const PipelineOptions& options) {
  if (dataset == nullptr) return absl::InvalidArgumentError("pipeline: no dataset");
  if (options.prefetch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.prefetch: must be >= 1, got ", options.prefetch));
  }
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline: rank ", options.rank, " is outside [0, world_size ", options.world_size, ")"));
  }
  if (options.start_epoch < 0 || options.start_step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: start (epoch ", options.start_epoch,
                                                   ", step ", options.start_step,
                                                   ") must not be negative"));
  }
  if (options.labels_only && dataset->may_skip()) {
    return absl::InvalidArgumentError(
        "pipeline: labels only needs a dataset that skips no example (this one may skip bad "
        "images, so only reading a batch tells its size)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Sampler> sampler,
                   Sampler::Create(dataset->size(), sampler_options));
  ASSIGN_OR_RETURN(Transform transform, Transform::Create(transform_spec, dataset->example_shape(),
                                                          sampler_options.seed));
  PipelineOptions o = options;
  const int64_t steps = sampler->steps_per_epoch();
  if (o.end_epoch < 0) o.end_epoch = o.start_epoch + 1;
  o.start_epoch += o.start_step / steps;
  o.start_step %= steps;
  std::unique_ptr<Pipeline> p(
      new Pipeline(std::move(dataset), std::move(sampler), std::move(transform), train, o));
  p->producer_ = std::thread([raw = p.get()] { raw->Produce(); });
  return p;
}

Pipeline::Pipeline(std::shared_ptr<const Dataset> dataset, std::unique_ptr<Sampler> sampler,
                   Transform transform, bool train, const PipelineOptions& options)
    : dataset_(std::move(dataset)),
      sampler_(std::move(sampler)),
      transform_(std::move(transform)),
      train_(train),
      options_(options) {
  if (options.labels_only) return;  // reads no example: no pool, no scratch
  int threads = 1;
  if (dataset_->decodes()) {
    threads = options.decode_threads > 0 ? options.decode_threads : common::UsableCores();
    pool_ = std::make_unique<WorkerPool>(threads);
  }
  scratch_.assign(threads, std::vector<unsigned char>(dataset_->example_bytes()));
}

Pipeline::~Pipeline() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (producer_.joinable()) producer_.join();
}

void Pipeline::Produce() {
  const int64_t steps = sampler_->steps_per_epoch();
  for (int64_t e = options_.start_epoch; e < options_.end_epoch; ++e) {
    for (int64_t s = e == options_.start_epoch ? options_.start_step : 0; s < steps; ++s) {
      Batch b;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &Pipeline::CanProduce));
        if (stop_) return;
        if (!free_.empty()) {
          b = std::move(free_.back());
          free_.pop_back();
        }
      }
      // The expensive part runs unlocked, overlapping the consumer.
      absl::Status st = Build(e, s, &b);
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      if (!st.ok()) {
        error_ = std::move(st);
        done_ = true;
        return;
      }
      queue_.push_back(std::move(b));
    }
  }
  absl::MutexLock lock(&mu_);
  done_ = true;
}

absl::Status Pipeline::Build(int64_t epoch, int64_t step, Batch* b) {
  b->indices = sampler_->Indices(epoch, step, options_.rank, options_.world_size);
  const int64_t n = static_cast<int64_t>(b->indices.size());
  const int64_t numel = dataset_->example_numel();
  b->n = n;
  b->epoch = epoch;
  b->step = step;
  b->global_n = sampler_->StepSize(step);
  b->last_in_epoch = step == sampler_->steps_per_epoch() - 1;
  b->example_shape = dataset_->example_shape();
  b->y.resize(static_cast<size_t>(n));
  if (options_.labels_only) {
    b->x.clear();
    for (int64_t j = 0; j < n; ++j) b->y[j] = dataset_->Label(b->indices[j]);
    return absl::OkStatus();
  }
  b->x.resize(static_cast<size_t>(n * numel));
  const bool bytes = dataset_->element_type() == ElementType::kU8;
  // kept[j]: example j was read (0 when the dataset skipped it).
  std::vector<uint8_t> kept(static_cast<size_t>(n), 1);
  std::vector<absl::Status> errors(static_cast<size_t>(n));
  auto one = [&](int worker, int64_t j) {
    const int64_t i = b->indices[j];
    absl::StatusOr<const void*> src = dataset_->Load(i, epoch, train_, scratch_[worker].data());
    if (!src.ok() || *src == nullptr) {
      kept[j] = 0;
      if (!src.ok()) errors[j] = src.status();
      return;
    }
    float* dst = b->x.data() + j * numel;
    if (bytes) {
      transform_.Apply(static_cast<const uint8_t*>(*src), dst, epoch, i, train_);
    } else {
      transform_.Apply(static_cast<const float*>(*src), dst, epoch, i, train_);
    }
    b->y[j] = dataset_->Label(i);
  };
  if (pool_ != nullptr) {
    pool_->Run(n, one);
  } else {
    for (int64_t j = 0; j < n; ++j) one(0, j);
  }
  // The first failure in batch order, whichever thread met it first.
  for (const absl::Status& e : errors) RETURN_IF_ERROR(e);
  if (std::find(kept.begin(), kept.end(), 0) == kept.end()) return absl::OkStatus();
  // Close the gaps of skipped examples, keeping the order.
  int64_t k = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (!kept[j]) continue;
    if (k != j) {
      std::memmove(b->x.data() + k * numel, b->x.data() + j * numel, numel * sizeof(float));
      b->y[k] = b->y[j];
      b->indices[k] = b->indices[j];
    }
    ++k;
  }
  b->n = k;
  b->x.resize(static_cast<size_t>(k * numel));
  b->y.resize(static_cast<size_t>(k));
  b->indices.resize(static_cast<size_t>(k));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Batch>> Pipeline::Next() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &Pipeline::HasOutput));
  if (queue_.empty()) {
    if (!error_.ok()) return error_;
    return std::optional<Batch>();
  }
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  return std::optional<Batch>(std::move(b));
}

void Pipeline::Recycle(Batch&& batch) {
  absl::MutexLock lock(&mu_);
  // Enough to cover every batch in flight; more would only hoard memory.
  if (static_cast<int>(free_.size()) < options_.prefetch + 1) {
    free_.push_back(std::move(batch));
  }
}

}  // namespace yoke::data
