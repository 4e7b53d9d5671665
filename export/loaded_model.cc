#include "export/loaded_model.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/open_dataset.h"
#include "engine/checkpoint.h"
#include "engine/registry.h"
#include "engine/zoo/model_zoo.h"
#include "jobspec/job_validate.h"

namespace yoke::exporter {

absl::StatusOr<engine::Tensor> LoadedModel::Find(const std::string& name) const {
  const engine::ParamSet& p = model->params();
  for (size_t i = 0; i < p.entries().size(); ++i) {
    if (p.entries()[i].name == name) return p.value(static_cast<int>(i));
  }
  for (size_t i = 0; i < p.state_entries().size(); ++i) {
    if (p.state_entries()[i].name == name) return p.state(static_cast<int>(i));
  }
  return absl::NotFoundError(absl::StrCat("the model has no parameter '", name, "'"));
}

namespace {

// Input shape and class count of checkpoints written before the header
// carried them: from data.train (and data.test), as the trainer builds it.
absl::Status ShapeFromData(LoadedModel* m) {
  ASSIGN_OR_RETURN(auto train, data::OpenDataset(m->spec.data().train(), "data.train"));
  m->input_shape.assign(train->example_shape().begin(), train->example_shape().end());
  m->num_classes = train->num_classes();
  if (m->spec.data().has_test() && !m->spec.data().test().format().empty()) {
    ASSIGN_OR_RETURN(auto test, data::OpenDataset(m->spec.data().test(), "data.test"));
    m->num_classes = std::max(m->num_classes, test->num_classes());
  }
  return absl::OkStatus();
}

absl::Status Restore(const engine::Checkpoint& ck, const std::string& name,
                     const engine::Tensor& dst) {
  const engine::Tensor* src = ck.Find(name);
  if (src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint has no '", name, "' tensor"));
  }
  if (src->numel() != dst.numel() || src->dtype() != dst.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint: '", name, "' holds ", src->numel(),
                     " values but the model its spec describes needs ", dst.numel()));
  }
  dst.CopyFrom(*src);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadedModel> LoadModel(const std::string& checkpoint) {
  LoadedModel m;
  m.path = checkpoint;
  std::error_code ec;
  if (std::filesystem::is_directory(checkpoint, ec)) {
    ASSIGN_OR_RETURN(m.path, engine::NewestValidCheckpoint(checkpoint));
  }
  ASSIGN_OR_RETURN(engine::Checkpoint ck, engine::ReadCheckpoint(m.path));
  m.step = ck.header.step();
  m.spec = ck.header.spec();
  RETURN_IF_ERROR(common::ValidateJobSpec(m.spec));
  if (ck.header.history_size() > 0) m.last_epoch = *ck.header.history().rbegin();
  m.class_names.assign(ck.header.class_names().begin(), ck.header.class_names().end());
  if (ck.header.input_shape_size() > 0 && ck.header.num_classes() > 0) {
    m.input_shape.assign(ck.header.input_shape().begin(), ck.header.input_shape().end());
    m.num_classes = ck.header.num_classes();
  } else {
    RETURN_IF_ERROR(common::Annotate(ShapeFromData(&m), "checkpoint without an input shape"));
  }
  const v1::ModelSpec& ms = m.spec.model();
  if (!ms.zoo().empty()) {
    ASSIGN_OR_RETURN(m.layers, engine::ExpandZoo(ms, m.input_shape, m.num_classes));
  } else {
    m.layers.assign(ms.layers().begin(), ms.layers().end());
  }
  for (size_t i = 0; i < m.layers.size(); ++i) {
    v1::LayerSpec& l = m.layers[i];
    if (l.name().empty()) l.set_name(absl::StrCat(engine::LayerKindName(l), "_", i));
  }
  ASSIGN_OR_RETURN(m.model, engine::Model::Create(ms, m.input_shape, m.num_classes));
  RETURN_IF_ERROR(common::Annotate(Restore(ck, "params", m.model->params().flat_values()), m.path));
  RETURN_IF_ERROR(common::Annotate(Restore(ck, "state", m.model->params().flat_state()), m.path));
  return m;
}

}  // namespace yoke::exporter
