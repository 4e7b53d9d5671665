#include "export/predict.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "config/config.h"
#include "data/open_dataset.h"
#include "data/pipeline.h"
#include "engine/layer.h"

namespace yoke::exporter {

int ArgMax(const float* row, int k) {
  int best = 0;
  for (int j = 1; j < k; ++j) {
    if (row[j] > row[best]) best = j;
  }
  return best;
}

absl::StatusOr<v1::DatasetSpec> PredictDataset(const LoadedModel& m, const PredictOptions& o,
                                               std::string* source) {
  if (o.split != "test" && o.split != "train") {
    return absl::InvalidArgumentError(
        absl::StrCat("--split: unknown value '", o.split, "' (known: test, train)"));
  }
  std::error_code ec;
  if (!o.data.empty() && std::filesystem::is_directory(o.data, ec)) {
    // An image folder, read as the model's training images were.
    v1::DatasetSpec d;
    const v1::DatasetSpec& train = m.spec.data().train();
    d.set_format("image_folder");
    d.set_root(o.data);
    if (train.format() == "image_folder") {
      *d.mutable_image_size() = train.image_size();
      d.set_channels(train.channels());
      d.set_crop(train.crop() == "random" ? "center" : train.crop());
      *d.mutable_crop_size() = train.crop_size();
    } else if (m.input_shape.size() == 3) {
      d.add_image_size(static_cast<int32_t>(m.input_shape[0]));
      d.add_image_size(static_cast<int32_t>(m.input_shape[1]));
      d.set_channels(static_cast<int32_t>(m.input_shape[2]));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--data ", o.data, ": a folder of images, but the model takes ",
                       engine::ShapeString(m.input_shape), " features"));
    }
    d.set_on_bad_image("skip");
    *source = absl::StrCat("image folder ", o.data);
    return d;
  }
  v1::DataSpec data = m.spec.data();
  *source = absl::StrCat("the checkpoint's data.", o.split);
  if (!o.data.empty()) {
    ASSIGN_OR_RETURN(v1::JobSpec spec, common::LoadJobSpecFile(o.data, {}));
    data = spec.data();
    *source = absl::StrCat(o.data, ": data.", o.split);
  }
  const v1::DatasetSpec& d = o.split == "train" ? data.train() : data.test();
  if (d.format().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(*source,
                                                   " is not set; name a job file or an "
                                                   "image folder with --data"));
  }
  return d;
}

namespace {

// Dataset label -> model class: the identity, unless both name their classes
// and the names differ (an image folder with other classes, or fewer).
std::vector<int32_t> LabelMap(const LoadedModel& m, const data::Dataset& set) {
  std::vector<int32_t> map(static_cast<size_t>(std::max(set.num_classes(), 0)));
  const std::vector<std::string> names = set.class_names();
  for (size_t i = 0; i < map.size(); ++i) {
    map[i] = static_cast<int32_t>(i) < m.num_classes ? static_cast<int32_t>(i) : -1;
    if (names.empty() || m.class_names.empty()) continue;
    auto it = std::find(m.class_names.begin(), m.class_names.end(), names[i]);
    map[i] = it == m.class_names.end() ? -1 : static_cast<int32_t>(it - m.class_names.begin());
  }
  return map;
}

}  // namespace

absl::StatusOr<PredictResult> Predict(LoadedModel& m, const PredictOptions& o) {
  PredictResult r;
  ASSIGN_OR_RETURN(v1::DatasetSpec ds, PredictDataset(m, o, &r.source));
  ASSIGN_OR_RETURN(std::shared_ptr<data::Dataset> set, data::OpenDataset(ds, "--data"));
  const engine::Shape shape(set->example_shape().begin(), set->example_shape().end());
  if (shape != m.input_shape) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.source, ": examples of shape ", engine::ShapeString(shape),
                     " but the model takes ", engine::ShapeString(m.input_shape)));
  }
  const std::vector<int32_t> label_map = LabelMap(m, *set);
  const v1::TrainingSpec& t = m.spec.training();
  data::SamplerOptions so;
  so.batch_size = o.batch > 0 ? o.batch : (t.eval_batch_size() > 0 ? t.eval_batch_size() : 500);
  so.seed = t.seed();
  so.shuffle = false;
  data::PipelineOptions po;
  po.prefetch = 2;
  // The model's own preprocessing, whatever a job file given as --data says.
  ASSIGN_OR_RETURN(auto pipe,
                   data::Pipeline::Create(set, so, m.spec.data().transform(), /*train=*/false, po));
  engine::LayerContext ctx;
  ctx.training = false;
  ctx.seed = t.seed();
  ctx.step = m.step;
  r.classes = m.num_classes;
  const int64_t per_example = engine::NumElements(m.input_shape);
  while (o.limit == 0 || r.n < o.limit) {
    ASSIGN_OR_RETURN(auto batch, pipe->Next());
    if (!batch.has_value()) break;
    if (batch->n == 0) continue;
    engine::Tensor x = engine::Tensor::Wrap(batch->x.data(), batch->x_shape(), engine::DType::kF32);
    ASSIGN_OR_RETURN(engine::Tensor logits, m.model->Forward(x, ctx));
    const int64_t take = o.limit == 0 ? batch->n : std::min(batch->n, o.limit - r.n);
    const float* z = logits.data<float>();
    r.logits.insert(r.logits.end(), z, z + take * r.classes);
    if (o.keep_inputs) {
      r.inputs.insert(r.inputs.end(), batch->x.begin(), batch->x.begin() + take * per_example);
    }
    for (int64_t i = 0; i < take; ++i) {
      const int32_t y = batch->y[i];
      const int32_t label =
          y >= 0 && y < static_cast<int32_t>(label_map.size()) ? label_map[y] : -1;
      r.labels.push_back(label);
      if (label < 0) continue;
      ++r.labelled;
      if (ArgMax(z + i * r.classes, r.classes) == label) ++r.correct;
    }
    r.n += take;
    pipe->Recycle(std::move(*batch));
  }
  return r;
}

}  // namespace yoke::exporter
