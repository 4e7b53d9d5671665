// yoke::Batch and yoke::DataLoader (include/yoke/data.h): the job's dataset
// readers, sampler and prefetching pipeline behind a small interface.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "api/internal.h"
#include "common/status.h"
#include "data/open_dataset.h"

namespace yoke {

Batch::Batch() = default;
Batch::~Batch() = default;
Batch::Batch(Batch&&) noexcept = default;
Batch& Batch::operator=(Batch&&) noexcept = default;

absl::StatusOr<Batch> Batch::FromData(std::vector<int64_t> example_shape,
                                      const std::vector<float>& x, std::vector<int32_t> labels) {
  int64_t numel = 1;
  for (int64_t d : example_shape) {
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Batch: example shape dimensions must be > 0, got ", d));
    }
    numel *= d;
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  if (static_cast<int64_t>(x.size()) != n * numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("Batch: ", n, " labels need ", n * numel, " values of shape ",
                     data::ShapeToString(example_shape), ", got ", x.size()));
  }
  Batch b;
  b.impl_ = std::make_unique<Impl>();
  data::Batch& d = b.impl_->batch;
  d.x.assign(x.begin(), x.end());
  d.y = std::move(labels);
  d.n = n;
  d.global_n = n;
  d.example_shape = std::move(example_shape);
  return b;
}

namespace {
const std::vector<int64_t> kNoShape;
}  // namespace

int64_t Batch::size() const { return impl_ ? impl_->batch.n : 0; }
int64_t Batch::global_size() const { return impl_ ? impl_->batch.global_n : 0; }
const std::vector<int64_t>& Batch::example_shape() const {
  return impl_ ? impl_->batch.example_shape : kNoShape;
}
const float* Batch::data() const { return impl_ ? impl_->batch.x.data() : nullptr; }
const int32_t* Batch::labels() const { return impl_ ? impl_->batch.y.data() : nullptr; }
int64_t Batch::epoch() const { return impl_ ? impl_->batch.epoch : 0; }
int64_t Batch::step() const { return impl_ ? impl_->batch.step : 0; }

struct DataLoader::Impl {
  std::shared_ptr<data::Dataset> dataset;
  v1::TransformSpec transform;
  bool train = false;  // augment (the train split)
  DataLoaderOptions options;
  int64_t steps_per_epoch = 0;
  std::unique_ptr<data::Pipeline> pipe;  // the current epoch's
};

namespace {

absl::StatusOr<DataLoader::Impl> Open(const v1::JobSpec& spec, const std::string& source,
                                      const std::string& split, const DataLoaderOptions& o) {
  if (split != "train" && split != "test") {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoader: split must be 'train' or 'test', got '", split, "'"));
  }
  if (!spec.has_data()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": no `data:` section (see docs/job_spec.md)"));
  }
  const bool train = split == "train";
  if (train ? !spec.data().has_train() : !spec.data().has_test()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": data.", split, ": missing"));
  }
  if (o.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoaderOptions.batch_size: must be > 0, got ", o.batch_size));
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DataLoaderOptions: rank ", o.rank, " must lie in [0, world_size ", o.world_size, ")"));
  }
  if (o.prefetch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DataLoaderOptions.prefetch: must be >= 1, got ", o.prefetch));
  }
  DataLoader::Impl impl;
  const std::string field = absl::StrCat("data.", split);
  ASSIGN_OR_RETURN(impl.dataset,
                   data::OpenDataset(train ? spec.data().train() : spec.data().test(), field));
  impl.transform = spec.data().transform();
  impl.train = train;
  impl.options = o;
  impl.steps_per_epoch = (impl.dataset->size() + o.batch_size - 1) / o.batch_size;
  return impl;
}

}  // namespace

DataLoader::DataLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;
DataLoader::~DataLoader() = default;

absl::StatusOr<DataLoader> DataLoader::FromYaml(const std::string& yaml, const std::string& split,
                                                const DataLoaderOptions& options) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, ParseSpecText(yaml, "<data yaml>"));
  ASSIGN_OR_RETURN(Impl impl, Open(spec, "<data yaml>", split, options));
  return DataLoader(std::make_unique<Impl>(std::move(impl)));
}

absl::StatusOr<DataLoader> DataLoader::FromYamlFile(const std::string& path,
                                                    const std::string& split,
                                                    const DataLoaderOptions& options) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, ParseSpecFile(path));
  ASSIGN_OR_RETURN(Impl impl, Open(spec, path, split, options));
  return DataLoader(std::make_unique<Impl>(std::move(impl)));
}

int64_t DataLoader::size() const { return impl_->dataset->size(); }
int64_t DataLoader::steps_per_epoch() const { return impl_->steps_per_epoch; }
const std::vector<int64_t>& DataLoader::example_shape() const {
  return impl_->dataset->example_shape();
}
int DataLoader::num_classes() const { return impl_->dataset->num_classes(); }
const DataLoaderOptions& DataLoader::options() const { return impl_->options; }

absl::Status DataLoader::StartEpoch(int64_t epoch) {
  if (epoch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("StartEpoch: epoch must be >= 0, got ", epoch));
  }
  impl_->pipe.reset();  // joins the previous epoch's producer first
  const DataLoaderOptions& o = impl_->options;
  data::SamplerOptions so;
  so.batch_size = o.batch_size;
  so.seed = o.seed;
  so.shuffle = o.shuffle;
  data::PipelineOptions po;
  po.prefetch = o.prefetch;
  po.rank = o.rank;
  po.world_size = o.world_size;
  po.start_epoch = epoch;
  po.end_epoch = epoch + 1;
  ASSIGN_OR_RETURN(impl_->pipe,
                   data::Pipeline::Create(impl_->dataset, so, impl_->transform, impl_->train, po));
  return absl::OkStatus();
}

absl::StatusOr<bool> DataLoader::Next(Batch* batch) {
  if (!impl_->pipe) {
    return absl::FailedPreconditionError(
        "DataLoader::Next: no epoch in progress; call StartEpoch(epoch) first");
  }
  if (batch->impl_ && !batch->impl_->batch.x.empty()) {
    impl_->pipe->Recycle(std::move(batch->impl_->batch));
  }
  ASSIGN_OR_RETURN(std::optional<data::Batch> next, impl_->pipe->Next());
  if (!next.has_value()) {
    impl_->pipe.reset();
    return false;
  }
  if (!batch->impl_) batch->impl_ = std::make_unique<Batch::Impl>();
  batch->impl_->batch = std::move(*next);
  return true;
}

}  // namespace yoke
