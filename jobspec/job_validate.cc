#include "jobspec/job_validate.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/quote.h"
#include "common/status.h"
#include "data/names/format_names.h"
#include "engine/names/engine_names.h"
#include "engine/shapes/layer_shapes.h"
#include "engine/zoo/model_zoo.h"
#include "jobspec/model_input_check.h"
#include "jobspec/path_confinement.h"
#include "jobspec/pipeline_check.h"
#include "jobspec/ps_check.h"

namespace yoke::common {

namespace {

bool IsResnet(const std::string& zoo) { return absl::StartsWith(zoo, "resnet"); }

// Collects every violation so a user fixes a job file in one round trip.
class Checker {
 public:
  void Add(std::string msg) { errors_.push_back(std::move(msg)); }

  template <typename T>
  void Positive(const std::string& path, T v) {
    if (!(v > 0)) Add(absl::StrCat(path, ": must be > 0, got ", v));
  }
  template <typename T>
  void NonNegative(const std::string& path, T v) {
    if (!(v >= 0)) Add(absl::StrCat(path, ": must be >= 0, got ", v));
  }
  // A finite float >= 0 (NaN fails every comparison, so check it explicitly).
  void NonNegativeFinite(const std::string& path, float v) {
    if (!std::isfinite(v) || v < 0) Add(absl::StrCat(path, ": must be finite and >= 0, got ", v));
  }
  void PositiveFinite(const std::string& path, float v) {
    if (!std::isfinite(v) || v <= 0) Add(absl::StrCat(path, ": must be finite and > 0, got ", v));
  }
  // [0, 1): rates and decay coefficients where 1 would freeze or zero everything.
  void UnitHalfOpen(const std::string& path, float v) {
    if (!(v >= 0 && v < 1)) Add(absl::StrCat(path, ": must be in [0, 1), got ", v));
  }
  void UnitClosed(const std::string& path, float v) {
    if (!(v >= 0 && v <= 1)) Add(absl::StrCat(path, ": must be in [0, 1], got ", v));
  }
  // `value` must be one of `known`; "" passes when `empty_ok` (a default).
  void OneOf(const std::string& path, const std::string& value,
             const std::vector<std::string>& known, const std::string& noun, bool empty_ok) {
    if (value.empty() && empty_ok) return;
    for (const std::string& k : known) {
      if (value == k) return;
    }
    if (value.empty()) {
      Add(absl::StrCat(path, ": required (one of ", absl::StrJoin(known, ", "), ")"));
    } else {
      Add(absl::StrCat(path, ": unknown ", noun, " ", Quote(value),
                       " (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  void Unused(const std::string& path, const std::string& why) {
    Add(absl::StrCat(path, ": not used ", why));
  }

  absl::Status Result() const {
    if (errors_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(errors_, "; "));
  }

 private:
  std::vector<std::string> errors_;
};

std::string KindNames() {
  const auto* o = v1::LayerSpec::descriptor()->FindOneofByName("kind");
  std::vector<std::string> names;
  for (int i = 0; i < o->field_count(); ++i) names.push_back(o->field(i)->name());
  return absl::StrJoin(names, ", ");
}

// A layer's argument rules are the engine's own (engine/shapes/), so a
// value its factory would refuse is refused here first.
void CheckLayer(Checker& c, const std::string& p, const v1::LayerSpec& l) {
  if (l.kind_case() == v1::LayerSpec::KIND_NOT_SET) {
    c.Add(absl::StrCat(p, ": no layer kind set (one of ", KindNames(), ")"));
  }
  for (const std::string& e : engine::shapes::ArgumentErrors(l)) c.Add(absl::StrCat(p, ".", e));
}

void CheckLayers(Checker& c, const v1::ModelSpec& m) {
  std::set<std::string> names;  // layers defined so far
  for (int i = 0; i < m.layers_size(); ++i) {
    const v1::LayerSpec& l = m.layers(i);
    const std::string p = absl::StrCat("model.layers[", i, "]");
    CheckLayer(c, p, l);
    const std::string kind = engine::shapes::KindName(l);
    // The model names an unnamed layer "<kind>_<index>", which an explicit
    // name elsewhere could collide with.
    const std::string name = l.name().empty() ? absl::StrCat(kind, "_", i) : l.name();
    if (HasControlChar(name)) {
      c.Add(absl::StrCat(p, ".name: control characters are not allowed (", Quote(name, 40), ")"));
    } else if (name == "input") {
      c.Add(absl::StrCat(p, ".name: 'input' is reserved for the model input"));
    } else if (!names.insert(name).second) {
      c.Add(absl::StrCat(p, ".name: ", Quote(name), " is already used by an earlier layer",
                         l.name().empty() ? " (it is this layer's default name)" : ""));
    }
    for (int j = 0; j < l.inputs_size(); ++j) {
      const std::string& in = l.inputs(j);
      if (in != "input" && (names.count(in) == 0 || in == name)) {
        c.Add(absl::StrCat(p, ".inputs[", j, "]: no earlier layer named ", Quote(in),
                           " (a layer may read 'input' or layers listed before it)"));
      }
    }
    if (kind == "add" && l.inputs_size() < 2) {
      c.Add(absl::StrCat(p, ".inputs: add needs at least 2 inputs, got ", l.inputs_size()));
    } else if (kind != "add" && l.inputs_size() > 1) {
      c.Add(absl::StrCat(p, ".inputs: ", kind.empty() ? "a layer" : kind, " takes 1 input, got ",
                         l.inputs_size()));
    }
  }
}

void CheckModel(Checker& c, const v1::JobSpec& spec) {
  if (!spec.has_model()) {
    c.Add("model: required (set model.zoo or model.layers)");
    return;
  }
  const v1::ModelSpec& m = spec.model();
  const bool zoo = !m.zoo().empty();
  if (zoo && m.layers_size() > 0) {
    c.Add(absl::StrCat("model: set either zoo or layers, not both (zoo is ", Quote(m.zoo()),
                       ", layers has ", m.layers_size(), " entries)"));
  } else if (!zoo && m.layers_size() == 0) {
    c.Add("model: set zoo (one of " + absl::StrJoin(engine::ZooNames(), ", ") +
          ") or a non-empty layers list");
  }
  if (zoo) c.OneOf("model.zoo", m.zoo(), engine::ZooNames(), "model", false);

  // Zoo knobs: each applies to some entries only; elsewhere it would be ignored.
  for (int i = 0; i < m.hidden_size(); ++i)
    c.Positive(absl::StrCat("model.hidden[", i, "]"), m.hidden(i));
  if (m.hidden_size() > 0 && m.zoo() != "mlp")
    c.Unused("model.hidden", "(only zoo 'mlp' has hidden layers)");
  c.UnitHalfOpen("model.dropout", m.dropout());
  if (m.dropout() != 0 && m.zoo() != "mlp" && m.zoo() != "cnn") {
    c.Unused("model.dropout", "(only zoo 'mlp' and 'cnn'; use a dropout layer in a layers list)");
  }
  c.NonNegative("model.width", m.width());
  if (m.width() > engine::kMaxZooWidth) {
    c.Add(absl::StrCat("model.width: at most ", engine::kMaxZooWidth, ", got ", m.width()));
  }
  if (m.width() != 0 && !IsResnet(m.zoo())) c.Unused("model.width", "(only the zoo resnets)");
  if (!zoo) CheckLayers(c, m);
}

void CheckShape(Checker& c, const std::string& p, const v1::DatasetSpec& d, bool required) {
  if (d.shape_size() == 0 && !required) return;
  if (d.shape_size() < 1 || d.shape_size() > 3) {
    c.Add(absl::StrCat(p, ".shape: needs 1 to 3 dimensions (H, W, C), got ", d.shape_size()));
  }
  double values = 1;  // no overflow: at most 3 factors below 2^31
  for (int i = 0; i < d.shape_size(); ++i) {
    c.Positive(absl::StrCat(p, ".shape[", i, "]"), d.shape(i));
    values *= std::max<int64_t>(1, d.shape(i));
  }
  if (values > static_cast<double>(data::kMaxSyntheticExampleValues)) {
    c.Add(absl::StrFormat("%s.shape: %.0f values per example, at most %d", p, values,
                          data::kMaxSyntheticExampleValues));
  }
}

// The image_folder fields: required and checked for that format, refused for
// the others (they would be ignored).
void CheckImageFolder(Checker& c, const std::string& p, const v1::DatasetSpec& d) {
  const std::string& f = d.format();
  if (f != "image_folder") {
    if (f.empty()) return;
    const std::string by = absl::StrCat("by format ", Quote(f), " (only image_folder)");
    if (!d.root().empty()) c.Unused(p + ".root", by);
    if (d.image_size_size() > 0) c.Unused(p + ".image_size", by);
    if (d.channels() != 0) c.Unused(p + ".channels", by);
    if (!d.crop().empty()) c.Unused(p + ".crop", by);
    if (d.crop_size_size() > 0) c.Unused(p + ".crop_size", by);
    if (d.validation_split() != 0) c.Unused(p + ".validation_split", by);
    if (!d.subset().empty()) c.Unused(p + ".subset", by);
    if (d.cache()) c.Unused(p + ".cache", by);
    if (!d.cache_file().empty()) c.Unused(p + ".cache_file", by);
    if (!d.on_bad_image().empty()) c.Unused(p + ".on_bad_image", by);
    return;
  }
  if (d.root().empty()) {
    c.Add(p + ".root: required by format 'image_folder' (the class folders' parent)");
  }
  if (d.image_size_size() != 2) {
    c.Add(absl::StrCat(p, ".image_size: format 'image_folder' needs [height, width], got ",
                       d.image_size_size(), " values"));
  }
  for (int i = 0; i < d.image_size_size(); ++i) {
    c.Positive(absl::StrCat(p, ".image_size[", i, "]"), d.image_size(i));
  }
  if (d.channels() != 0 && d.channels() != 1 && d.channels() != 3) {
    c.Add(absl::StrCat(p, ".channels: must be 1 (grayscale) or 3 (RGB), got ", d.channels()));
  }
  c.OneOf(p + ".crop", d.crop(), {"none", "center", "random"}, "crop", true);
  const bool crop = d.crop() == "center" || d.crop() == "random";
  if (crop && d.crop_size_size() != 2) {
    c.Add(absl::StrCat(p, ".crop_size: crop ", Quote(d.crop()), " needs [height, width], got ",
                       d.crop_size_size(), " values"));
  } else if (!crop && d.crop_size_size() > 0) {
    c.Unused(p + ".crop_size", "without crop: center or random");
  }
  for (int i = 0; crop && i < d.crop_size_size(); ++i) {
    const std::string f_i = absl::StrCat(p, ".crop_size[", i, "]");
    c.Positive(f_i, d.crop_size(i));
    if (i < d.image_size_size() && d.crop_size(i) > d.image_size(i)) {
      c.Add(absl::StrCat(f_i, ": must be <= image_size[", i, "] (", d.image_size(i), "), got ",
                         d.crop_size(i)));
    }
  }
  c.UnitHalfOpen(p + ".validation_split", d.validation_split());
  if (d.validation_split() > 0) {
    c.OneOf(p + ".subset", d.subset(), {"training", "validation"}, "subset", false);
  } else if (!d.subset().empty()) {
    c.Unused(p + ".subset", "without validation_split > 0");
  }
  c.OneOf(p + ".on_bad_image", d.on_bad_image(), {"fail", "skip"}, "on_bad_image", true);
  if (d.cache() && !d.cache_file().empty()) {
    c.Add(p + ".cache_file: set cache (memory) or cache_file, not both");
  }
  if (d.shape_size() > 0) c.Unused(p + ".shape", "by format 'image_folder' (use image_size)");
  if (d.files_size() > 0) c.Unused(p + ".files", "by format 'image_folder' (use root)");
}

void CheckDataset(Checker& c, const std::string& p, const v1::DatasetSpec& d) {
  CheckImageFolder(c, p, d);
  c.OneOf(p + ".format", d.format(), data::DatasetFormats(), "format", false);
  const std::string& f = d.format();
  const std::string by = absl::StrCat("by format ", Quote(f));
  for (int i = 0; i < d.files_size(); ++i) {
    if (d.files(i).empty()) c.Add(absl::StrCat(p, ".files[", i, "]: must not be empty"));
  }
  if (f == "idx") {
    if (d.images().empty()) c.Add(p + ".images: required by format 'idx' (the images file)");
    if (d.labels().empty()) c.Add(p + ".labels: required by format 'idx' (the labels file)");
  } else {
    if (!d.images().empty()) c.Unused(p + ".images", by + " (only idx)");
    if (!d.labels().empty()) c.Unused(p + ".labels", by + " (only idx)");
  }
  if (f == "cifar10" && d.files_size() == 0) {
    c.Add(p + ".files: format 'cifar10' needs at least one batch file");
  }
  if (f == "csv" && d.files_size() != 1) {
    c.Add(absl::StrCat(p, ".files: format 'csv' needs exactly 1 file, got ", d.files_size()));
  }
  if ((f == "idx" || f == "synthetic") && d.files_size() > 0) {
    c.Unused(p + ".files", by + (f == "idx" ? " (use images and labels)" : ""));
  }
  if (f == "csv") {
    if (d.label_column() < -1) {
      c.Add(absl::StrCat(p, ".label_column: must be >= -1 (-1 = last column), got ",
                         d.label_column()));
    }
  } else if (!f.empty()) {
    if (d.label_column() != 0) c.Unused(p + ".label_column", by + " (only csv)");
    if (d.header()) c.Unused(p + ".header", by + " (only csv)");
  }
  if (f == "synthetic") {
    CheckShape(c, p, d, /*required=*/true);
    if (d.num_classes() < 2) {
      c.Add(absl::StrCat(p, ".num_classes: must be >= 2, got ", d.num_classes()));
    }
    c.Positive(p + ".num_examples", d.num_examples());
  } else {
    if (f == "csv") CheckShape(c, p, d, /*required=*/false);
    if ((f == "idx" || f == "cifar10") && d.shape_size() > 0) {
      c.Unused(p + ".shape", by + " (the files define it)");
    }
    if (d.num_classes() != 0 && d.num_classes() < 2) {
      c.Add(absl::StrCat(p, ".num_classes: must be >= 2 (or 0 to infer), got ", d.num_classes()));
    }
    c.NonNegative(p + ".num_examples", d.num_examples());
  }
}

void CheckData(Checker& c, const v1::JobSpec& spec) {
  if (!spec.has_data()) {
    c.Add("data: required (at least data.train)");
    return;
  }
  const v1::DataSpec& d = spec.data();
  if (!d.has_train()) {
    c.Add("data.train: required");
  } else {
    CheckDataset(c, "data.train", d.train());
  }
  if (d.has_test()) CheckDataset(c, "data.test", d.test());
  // One cache file holds one dataset's images: two datasets sharing it would
  // rebuild it for each other on every open.
  if (!d.train().cache_file().empty() &&
      NormalizePath(d.train().cache_file()) == NormalizePath(d.test().cache_file())) {
    c.Add(absl::StrCat("data.test.cache_file: ", Quote(d.test().cache_file()),
                       " is data.train's cache file too; give each dataset its own"));
  }
  const v1::TransformSpec& t = d.transform();
  c.NonNegativeFinite("data.transform.divisor", t.divisor());
  for (int i = 0; i < t.mean_size(); ++i) {
    if (!std::isfinite(t.mean(i))) {
      c.Add(absl::StrCat("data.transform.mean[", i, "]: must be finite, got ", t.mean(i)));
    }
  }
  for (int i = 0; i < t.std_size(); ++i) {
    c.PositiveFinite(absl::StrCat("data.transform.std[", i, "]"), t.std(i));
  }
  if (t.mean_size() > 0 && t.std_size() > 0 && t.mean_size() != t.std_size()) {
    c.Add(absl::StrCat("data.transform.std: has ", t.std_size(),
                       " entries but data.transform.mean has ", t.mean_size(),
                       " (one per channel each)"));
  }
  c.NonNegative("data.transform.random_crop_padding", t.random_crop_padding());
  c.NonNegative("data.prefetch", d.prefetch());
  c.UnitHalfOpen("data.validation_split", d.validation_split());
  if (d.validation_split() > 0 && d.train().validation_split() != 0) {
    c.Add(
        "data.validation_split: cannot be combined with data.train.validation_split (the "
        "image_folder's own split, chosen with data.train.subset); set only one of them");
  }
  // A synthetic set's size is known: the split data/validation_split.cc makes
  // must leave examples on both sides.
  const int64_t n = d.train().format() == "synthetic" ? d.train().num_examples() : 0;
  const double fraction = d.validation_split();
  if (fraction > 0 && fraction < 1 && n > 0) {
    const auto held = static_cast<int64_t>(std::floor(fraction * static_cast<double>(n)));
    if (held < 1 || held >= n) {
      c.Add(absl::StrCat("data.validation_split: ", fraction, " of the ", n,
                         " training examples holds out ", held, ", leaving ",
                         held < 1 ? "no validation" : "no training", " examples; use a ",
                         held < 1 ? "larger" : "smaller", " fraction or more data"));
    }
  }
}

void CheckOptimizer(Checker& c, const v1::TrainingSpec& t) {
  const std::string p = "training.optimizer";
  if (!t.has_optimizer()) {
    c.Add(p + ": required (at least type and lr)");
    return;
  }
  const v1::OptimizerSpec& o = t.optimizer();
  c.OneOf(p + ".type", o.type(), engine::KnownOptimizers(), "optimizer", false);
  c.PositiveFinite(p + ".lr", o.lr());
  c.UnitHalfOpen(p + ".momentum", o.momentum());
  if (o.nesterov() && !(o.momentum() > 0)) {
    c.Add(absl::StrCat(p, ".nesterov: needs momentum > 0, got momentum ", o.momentum()));
  }
  c.NonNegativeFinite(p + ".weight_decay", o.weight_decay());
  c.UnitHalfOpen(p + ".beta1", o.beta1());
  c.UnitHalfOpen(p + ".beta2", o.beta2());
  c.NonNegativeFinite(p + ".epsilon", o.epsilon());
  const bool adam = o.type() == "adam" || o.type() == "adamw";
  if (o.type() == "sgd") {
    if (o.beta1() != 0) c.Unused(p + ".beta1", "by sgd (only adam, adamw)");
    if (o.beta2() != 0) c.Unused(p + ".beta2", "by sgd (only adam, adamw)");
    if (o.epsilon() != 0) c.Unused(p + ".epsilon", "by sgd (only adam, adamw)");
  } else if (adam) {
    const std::string by = absl::StrCat("by ", o.type(), " (only sgd)");
    if (o.momentum() != 0) c.Unused(p + ".momentum", by + "; adam's are beta1/beta2");
    if (o.nesterov()) c.Unused(p + ".nesterov", by);
  }
}

void CheckSchedule(Checker& c, const v1::TrainingSpec& t) {
  const std::string p = "training.schedule";
  const v1::ScheduleSpec& s = t.schedule();
  c.OneOf(p + ".type", s.type(), engine::KnownSchedules(), "schedule", true);
  c.NonNegative(p + ".warmup_steps", s.warmup_steps());
  if (s.type() == "step") {
    c.Positive(p + ".step_size", s.step_size());
  } else if (s.step_size() != 0) {
    c.Unused(p + ".step_size", "(only by schedule type 'step')");
  }
  if (!(s.gamma() >= 0 && s.gamma() <= 1)) {
    c.Add(absl::StrCat(p, ".gamma: must be in (0, 1] (0 = default 0.1), got ", s.gamma()));
  } else if (s.gamma() != 0 && s.type() != "step") {
    c.Unused(p + ".gamma", "(only by schedule type 'step')");
  }
  c.NonNegativeFinite(p + ".min_lr", s.min_lr());
  if (s.min_lr() != 0 && s.type() != "cosine") {
    c.Unused(p + ".min_lr", "(only by schedule type 'cosine')");
  } else if (s.min_lr() > 0 && t.has_optimizer() && s.min_lr() >= t.optimizer().lr()) {
    c.Add(absl::StrCat(p, ".min_lr: must be below training.optimizer.lr (", t.optimizer().lr(),
                       "), got ", s.min_lr()));
  }
}

// Accumulation, clipping, label smoothing and early stopping.
void CheckTrainingOptions(Checker& c, const v1::JobSpec& spec) {
  const v1::TrainingSpec& t = spec.training();
  c.OneOf("training.precision", t.precision(), {"fp32", "tf32", "bf16", "fp16"}, "precision", true);
  const bool cuda = spec.distribution().device() == "cuda";
  if (t.precision() == "tf32" && !cuda) {
    c.Add(
        "training.precision: 'tf32' is a GPU precision (tensor cores reading fp32 at TF32); "
        "use it with distribution.device: cuda, or fp32 on the cpu");
  } else if ((t.precision() == "bf16" && cuda) || t.precision() == "fp16") {
    c.Add(absl::StrCat("training.precision: '", t.precision(), "' is not implemented yet on ",
                       cuda ? "cuda" : "cpu",
                       " (fp32 everywhere, bf16 on the cpu, tf32 on cuda; the CUDA engine's "
                       "mixed precision brings the rest)"));
  }
  if (t.recompute() && cuda) {
    c.Add(
        "training.recompute: the CUDA engine does not recompute activations yet; use it with "
        "distribution.device: cpu");
  }
  if (t.recompute_batch_norm() && cuda) {
    c.Add(
        "training.recompute_batch_norm: the CUDA engine does not recompute activations yet; use "
        "it with distribution.device: cpu");
  }
  if (t.recompute_batch_norm() && t.recompute()) {
    c.Add(
        "training.recompute_batch_norm: not with training.recompute, which computes batch norm's "
        "outputs again already; use one or the other");
  }
  c.NonNegative("training.accumulation_steps", t.accumulation_steps());
  const int64_t k = t.accumulation_steps();
  const int64_t replicas = DataParallelReplicas(spec);
  if (k > 1 && t.batch_size() > 0) {
    if (t.batch_size() % k != 0) {
      c.Add(absl::StrCat("training.accumulation_steps: training.batch_size (", t.batch_size(),
                         ", the global batch of one optimizer step) must be divisible by it, "
                         "got ",
                         k));
    } else if (t.batch_size() / k < replicas) {
      c.Add(absl::StrCat("training.accumulation_steps: a micro-batch of training.batch_size / ", k,
                         " = ", t.batch_size() / k, " samples leaves some of the ", replicas,
                         " replicas without samples; use fewer steps or a larger batch"));
    }
  }
  if (k > 1 && spec.distribution().sync_batch_norm()) {
    c.Add(
        "training.accumulation_steps: not supported with distribution.sync_batch_norm (its "
        "statistics would span one micro-batch, not the step); set one of them");
  }
  c.NonNegativeFinite("training.clip_grad_norm", t.clip_grad_norm());
  c.UnitHalfOpen("training.label_smoothing", t.label_smoothing());
  if (t.label_smoothing() != 0 && t.loss() == "mse") {
    c.Unused("training.label_smoothing", "by loss 'mse' (only by softmax_cross_entropy)");
  }
  const v1::EarlyStoppingSpec& es = t.early_stopping();
  const std::string p = "training.early_stopping";
  c.OneOf(p + ".monitor", es.monitor(),
          {"validation_loss", "validation_accuracy", "test_loss", "test_accuracy"}, "metric",
          /*empty_ok=*/true);
  if (es.monitor().empty()) {
    if (es.patience() != 0) c.Unused(p + ".patience", "without a monitor");
    if (es.min_delta() != 0) c.Unused(p + ".min_delta", "without a monitor");
  } else {
    c.Positive(p + ".patience", es.patience());
    c.NonNegativeFinite(p + ".min_delta", es.min_delta());
    if (absl::StartsWith(es.monitor(), "validation_") && !(spec.data().validation_split() > 0)) {
      c.Add(absl::StrCat(p, ".monitor: '", es.monitor(),
                         "' needs a validation set: set data.validation_split"));
    }
    if (absl::StartsWith(es.monitor(), "test_") && !spec.data().has_test()) {
      c.Add(absl::StrCat(p, ".monitor: '", es.monitor(), "' needs data.test"));
    }
  }
  if (spec.checkpoint().keep_best()) {
    if (spec.checkpoint().dir().empty()) {
      c.Add("checkpoint.keep_best: needs checkpoint.dir (best.ckpt is written there)");
    }
    if (es.monitor().empty()) {
      c.Add(
          "checkpoint.keep_best: needs training.early_stopping.monitor (the metric that "
          "picks the best epoch)");
    }
  }
}

void CheckTraining(Checker& c, const v1::JobSpec& spec) {
  if (!spec.has_training()) {
    c.Add("training: required (epochs, batch_size, optimizer)");
    return;
  }
  const v1::TrainingSpec& t = spec.training();
  c.Positive("training.epochs", t.epochs());
  c.Positive("training.batch_size", t.batch_size());
  c.OneOf("training.loss", t.loss(), {"softmax_cross_entropy", "mse"}, "loss", true);
  CheckOptimizer(c, t);
  CheckSchedule(c, t);
  c.NonNegative("training.max_steps", t.max_steps());
  c.NonNegative("training.eval_batch_size", t.eval_batch_size());
  c.NonNegative("training.log_every_steps", t.log_every_steps());
  c.NonNegative("training.threads", t.threads());
  if (t.threads() > kMaxTrainingThreads) {
    c.Add(absl::StrCat("training.threads: at most ", kMaxTrainingThreads,
                       " (the trainer caps it at the worker's cores), got ", t.threads()));
  }
  CheckTrainingOptions(c, spec);
}

void CheckPlacement(Checker& c, const v1::JobSpec& spec) {
  const v1::DistributionSpec& d = spec.distribution();
  c.NonNegative("distribution.workers", d.workers());
  c.NonNegative("distribution.devices_per_worker", d.devices_per_worker());
  c.OneOf("distribution.device", d.device(), {"cpu", "cuda"}, "device", true);
  // The CUDA engine trains one replica on one GPU: several GPU replicas need
  // the NCCL gradient reducer, and gradient accumulation a device pass,
  // neither built yet. Refused here, at submit or `yoke train`, not in the
  // trainer after scheduling.
  if (d.device() == "cuda") {
    if (d.workers() > 1 || d.devices_per_worker() > 1) {
      c.Add(absl::StrCat(
          "distribution.device: 'cuda' trains on one GPU for now (distribution.workers and "
          "devices_per_worker at most 1, got ",
          d.workers(), " and ", d.devices_per_worker(),
          "): several GPU replicas need the NCCL gradient reducer, which is not built yet"));
    }
    if (spec.training().accumulation_steps() > 1) {
      c.Add(
          "training.accumulation_steps: above 1 is not supported on distribution.device "
          "'cuda' yet");
    }
  }
  c.NonNegativeFinite("distribution.bucket_cap_mb", d.bucket_cap_mb());
  c.NonNegativeFinite("distribution.first_bucket_mb", d.first_bucket_mb());
  c.OneOf("distribution.gradient_compression", d.gradient_compression(), {"none", "fp16", "bf16"},
          "compression", true);
  c.NonNegative("distribution.collective_timeout_s", d.collective_timeout_s());
  // The global batch is split over the data-parallel replicas (pipelines,
  // when there are stages); each needs at least one example.
  const int64_t replicas = DataParallelReplicas(spec);
  if (spec.training().batch_size() > 0 && spec.training().batch_size() < replicas) {
    c.Add(absl::StrCat("training.batch_size: the global batch (", spec.training().batch_size(),
                       ") must be at least the number of replicas (", replicas,
                       d.has_pipeline()
                           ? " pipelines = distribution.workers x devices_per_worker / stages)"
                           : " = distribution.workers x devices_per_worker)"));
  }
  for (std::string& e : PipelineSpecErrors(spec)) c.Add(std::move(e));
  for (std::string& e : ParameterServerSpecErrors(spec)) c.Add(std::move(e));
  const v1::CheckpointSpec& k = spec.checkpoint();
  c.NonNegative("checkpoint.every_steps", k.every_steps());
  c.NonNegative("checkpoint.keep", k.keep());
  if (k.dir().empty() && (k.every_steps() != 0 || k.keep() != 0)) {
    c.Add("checkpoint.dir: required when checkpoint.every_steps or checkpoint.keep is set");
  }
  c.NonNegative("restart.max_restarts", spec.restart().max_restarts());
  c.NonNegative("max_run_seconds", spec.max_run_seconds());
}

}  // namespace

std::string TensorBoardDir(const v1::JobSpec& spec) {
  const std::string& dir = spec.logging().tensorboard_dir();
  if (dir == "off") return "";
  if (!dir.empty()) return dir;
  if (spec.checkpoint().dir().empty()) return "";
  return spec.checkpoint().dir() + "/tensorboard";
}

absl::Status ValidateJobSpec(const v1::JobSpec& spec) {
  // Size first: a spec past the limit is refused before anything walks it.
  const size_t bytes = spec.ByteSizeLong();
  if (bytes > kMaxSubmitSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec: ", bytes, " bytes serialized, at most ", kMaxSubmitSpecBytes, " (1 MiB)"));
  }
  Checker c;
  if (spec.name().size() > kMaxJobNameChars) {
    c.Add(absl::StrCat("name: at most ", kMaxJobNameChars, " characters, got ", spec.name().size(),
                       " (", Quote(spec.name(), 40), ")"));
  } else if (HasControlChar(spec.name())) {
    c.Add(absl::StrCat("name: control characters are not allowed (", Quote(spec.name(), 40),
                       "): terminals act on them when the name is printed"));
  }
  CheckModel(c, spec);
  CheckData(c, spec);
  CheckTraining(c, spec);
  CheckPlacement(c, spec);
  RETURN_IF_ERROR(c.Result());
  return CheckModelForKnownInput(spec);
}

}  // namespace yoke::common
