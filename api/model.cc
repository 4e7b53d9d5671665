// yoke::Tensor, yoke::Model and yoke::ModelBuilder (include/yoke/model.h):
// a thin layer over engine::Model that tracks what the gradient buffer means.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "api/internal.h"
#include "common/status.h"
#include "config/config.h"
#include "engine/zoo/model_zoo.h"

namespace yoke {

absl::StatusOr<Tensor> Tensor::Create(std::vector<int64_t> shape, std::vector<float> values) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("Tensor: negative dimension ", d));
    n *= d;
  }
  if (n != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor: the shape holds ", n, " values, got ", values.size()));
  }
  Tensor t;
  t.shape_ = std::move(shape);
  t.values_ = std::move(values);
  return t;
}

absl::StatusOr<v1::JobSpec> ParseSpecText(const std::string& yaml, const std::string& source) {
  return common::LoadJobSpecString(yaml, {}, source);
}

absl::StatusOr<v1::JobSpec> ParseSpecFile(const std::string& path) {
  return common::LoadJobSpecFile(path, {});
}

namespace {

absl::StatusOr<Model> Build(const v1::ModelSpec& spec, const std::vector<int64_t>& input_shape,
                            int num_classes, uint64_t seed,
                            Model (*make)(std::shared_ptr<Model::Impl>)) {
  if (input_shape.empty()) {
    return absl::InvalidArgumentError(
        "model: the input shape is empty (one example's shape, "
        "e.g. {28, 28, 1})");
  }
  for (int64_t d : input_shape) {
    if (d <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("model: input shape dimensions must be > 0, got ", d));
    }
  }
  if (num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: num_classes must be > 0, got ", num_classes));
  }
  auto impl = std::make_shared<Model::Impl>();
  ASSIGN_OR_RETURN(impl->model, engine::Model::Create(spec, input_shape, num_classes));
  impl->model->params().Initialize(seed);
  impl->input_shape = input_shape;
  impl->num_classes = num_classes;
  impl->seed = seed;
  return make(std::move(impl));
}

}  // namespace

Model::Model(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

absl::StatusOr<Model> Model::FromYaml(const std::string& yaml,
                                      const std::vector<int64_t>& input_shape, int num_classes,
                                      uint64_t seed) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, ParseSpecText(yaml, "<model yaml>"));
  if (!spec.has_model()) {
    return absl::InvalidArgumentError(
        "model: the YAML has no `model:` section (e.g. \"model: {zoo: mlp}\")");
  }
  return Build(spec.model(), input_shape, num_classes, seed,
               [](std::shared_ptr<Impl> i) { return Model(std::move(i)); });
}

absl::StatusOr<Model> Model::FromYamlFile(const std::string& path,
                                          const std::vector<int64_t>& input_shape, int num_classes,
                                          uint64_t seed) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, ParseSpecFile(path));
  if (!spec.has_model()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no `model:` section"));
  }
  return Build(spec.model(), input_shape, num_classes, seed,
               [](std::shared_ptr<Impl> i) { return Model(std::move(i)); });
}

absl::StatusOr<Model> Model::FromZoo(const std::string& name,
                                     const std::vector<int64_t>& input_shape, int num_classes,
                                     uint64_t seed) {
  v1::ModelSpec spec;
  spec.set_zoo(name);
  return Build(spec, input_shape, num_classes, seed,
               [](std::shared_ptr<Impl> i) { return Model(std::move(i)); });
}

std::vector<std::string> Model::ZooNames() { return engine::ZooNames(); }

namespace {

// Forward on n examples at `x` (shape (n, input_shape...)).
absl::StatusOr<Tensor> ForwardRaw(const std::shared_ptr<Model::Impl>& impl, const float* x,
                                  const std::vector<int64_t>& shape) {
  Model::Impl& m = *impl;
  if (shape.size() != m.input_shape.size() + 1 ||
      !std::equal(m.input_shape.begin(), m.input_shape.end(), shape.begin() + 1)) {
    std::vector<int64_t> want{-1};
    want.insert(want.end(), m.input_shape.begin(), m.input_shape.end());
    return absl::InvalidArgumentError(absl::StrCat(
        "Forward: input of shape ", data::ShapeToString(shape), " does not match the model's ",
        data::ShapeToString(want), " (n examples first)"));
  }
  if (shape[0] == 0) return absl::InvalidArgumentError("Forward: the batch has no examples");
  m.input.assign(x, x + engine::NumElements(shape));
  engine::LayerContext ctx;
  ctx.training = m.training;
  ctx.seed = m.seed;
  ctx.step = m.training ? m.train_forwards++ : m.train_forwards;
  ctx.replica = m.ctx ? m.ctx->options.rank : 0;
  ASSIGN_OR_RETURN(engine::Tensor logits,
                   m.model->Forward(engine::Tensor::Wrap(m.input.data(), shape), ctx));
  ++m.forward_id;
  m.forward_training = m.training;
  m.forward_n = shape[0];
  m.forward_ctx = ctx;
  const float* p = logits.data<float>();
  ASSIGN_OR_RETURN(Tensor out,
                   Tensor::Create(logits.shape(), std::vector<float>(p, p + logits.numel())));
  auto origin = std::make_shared<Tensor::Origin>();
  origin->model = impl;
  origin->forward_id = m.forward_id;
  out.set_origin(std::move(origin));
  return out;
}

}  // namespace

absl::StatusOr<Tensor> Model::Forward(const Batch& batch) {
  if (batch.impl() == nullptr) return absl::InvalidArgumentError("Forward: the batch is empty");
  const data::Batch& b = batch.impl()->batch;
  return ForwardRaw(impl_, b.x.data(), b.x_shape());
}

absl::StatusOr<Tensor> Model::Forward(const Tensor& x) {
  if (engine::NumElements(x.shape()) != x.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("Forward: the input's shape ",
                                                   data::ShapeToString(x.shape()),
                                                   " does not hold its ", x.numel(), " values"));
  }
  return ForwardRaw(impl_, x.values().data(), x.shape());
}

absl::Status Model::Impl::BackwardSum(const engine::Tensor& dlogits_sum) {
  if (forward_id == 0)
    return absl::FailedPreconditionError("Backward: no Forward to go back through");
  if (!forward_training) {
    return absl::FailedPreconditionError(
        "Backward: the last Forward ran in evaluation mode; call SetTraining(true) before the "
        "Forward you want gradients of");
  }
  engine::Model::GradReadyFn ready;
  if (reducer) {
    if (step_prepared) {
      return absl::FailedPreconditionError(
          "Backward: the previous Backward's gradients were not allreduced yet; call "
          "AllreduceGradients(model) after every Backward");
    }
    RETURN_IF_ERROR(reducer->Prepare(forward_n));
    step_prepared = true;
    collective::Reducer* r = reducer.get();
    ready = [r](int id) { r->MarkReady(id); };
  }
  RETURN_IF_ERROR(model->Backward(dlogits_sum, forward_ctx, ready));
  grad_count = forward_n;
  return absl::OkStatus();
}

absl::Status Model::Backward(const Tensor& dlogits) {
  Impl& m = *impl_;
  const std::vector<int64_t> want{m.forward_n, m.num_classes};
  if (dlogits.shape() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("Backward: dlogits of shape ", data::ShapeToString(dlogits.shape()),
                     " do not match the last Forward's logits ", data::ShapeToString(want)));
  }
  // The mean's gradient times n is the sum's.
  std::vector<float> sum(dlogits.values());
  for (float& v : sum) v *= static_cast<float>(m.forward_n);
  return m.BackwardSum(engine::Tensor::Wrap(sum.data(), want));
}

void Model::SetTraining(bool training) { impl_->training = training; }
bool Model::training() const { return impl_->training; }
const std::vector<int64_t>& Model::input_shape() const { return impl_->input_shape; }
int Model::num_classes() const { return impl_->num_classes; }
int64_t Model::num_parameters() const { return impl_->model->params().num_parameters(); }
std::string Model::Summary() const { return impl_->model->Summary(); }

namespace {

// The entries of a flat buffer laid out as `ps`'s values, concatenated.
std::vector<float> Gather(const engine::ParamSet& ps, const float* flat, float scale) {
  std::vector<float> out;
  out.reserve(ps.num_parameters());
  for (const auto& e : ps.entries()) {
    const int64_t n = engine::NumElements(e.shape);
    for (int64_t i = 0; i < n; ++i) out.push_back(flat[e.offset + i] * scale);
  }
  return out;
}

}  // namespace

std::vector<float> Model::Parameters() const {
  const engine::ParamSet& ps = impl_->model->params();
  return Gather(ps, ps.flat_values().data<float>(), 1.0f);
}

absl::Status Model::SetParameters(const std::vector<float>& values) {
  engine::ParamSet& ps = impl_->model->params();
  if (static_cast<int64_t>(values.size()) != ps.num_parameters()) {
    return absl::InvalidArgumentError(absl::StrCat("SetParameters: the model has ",
                                                   ps.num_parameters(), " parameters, got ",
                                                   values.size(), " values"));
  }
  float* flat = ps.flat_values().data<float>();
  size_t k = 0;
  for (const auto& e : ps.entries()) {
    const int64_t n = engine::NumElements(e.shape);
    std::memcpy(flat + e.offset, values.data() + k, n * sizeof(float));
    k += n;
  }
  return absl::OkStatus();
}

std::vector<float> Model::Gradients() const {
  const engine::ParamSet& ps = impl_->model->params();
  const float scale = 1.0f / static_cast<float>(std::max<int64_t>(impl_->grad_count, 1));
  return Gather(ps, ps.flat_grads().data<float>(), scale);
}

uint64_t Model::Checksum() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const engine::Tensor& t) {
    if (!t.defined()) return;
    const auto* p = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0; i < t.bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  };
  mix(impl_->model->params().flat_values());
  mix(impl_->model->params().flat_state());
  return h;
}

// ModelBuilder: records LayerSpecs; the engine checks them in Build().
struct ModelBuilder::Spec {
  v1::ModelSpec model;
};

ModelBuilder::ModelBuilder() : spec_(std::make_unique<Spec>()) {}
ModelBuilder::~ModelBuilder() = default;
ModelBuilder::ModelBuilder(const ModelBuilder& o) : spec_(std::make_unique<Spec>(*o.spec_)) {}
ModelBuilder& ModelBuilder::operator=(const ModelBuilder& o) {
  *spec_ = *o.spec_;
  return *this;
}

ModelBuilder& ModelBuilder::Dense(int units, bool bias) {
  auto* d = spec_->model.add_layers()->mutable_dense();
  d->set_units(units);
  d->set_no_bias(!bias);
  return *this;
}
ModelBuilder& ModelBuilder::Conv2d(int filters, int kernel, int stride, const std::string& padding,
                                   bool bias) {
  auto* c = spec_->model.add_layers()->mutable_conv2d();
  c->set_filters(filters);
  c->set_kernel(kernel);
  c->set_stride(stride);
  c->set_padding(padding);
  c->set_no_bias(!bias);
  return *this;
}
ModelBuilder& ModelBuilder::MaxPool2d(int size, int stride) {
  auto* p = spec_->model.add_layers()->mutable_max_pool2d();
  p->set_size(size);
  p->set_stride(stride);
  return *this;
}
ModelBuilder& ModelBuilder::AvgPool2d(int size, int stride) {
  auto* p = spec_->model.add_layers()->mutable_avg_pool2d();
  p->set_size(size);
  p->set_stride(stride);
  return *this;
}
ModelBuilder& ModelBuilder::GlobalAvgPool() {
  spec_->model.add_layers()->mutable_global_avg_pool();
  return *this;
}
ModelBuilder& ModelBuilder::BatchNorm(float momentum, float epsilon) {
  auto* b = spec_->model.add_layers()->mutable_batch_norm();
  b->set_momentum(momentum);
  b->set_epsilon(epsilon);
  return *this;
}
ModelBuilder& ModelBuilder::Dropout(float rate) {
  spec_->model.add_layers()->mutable_dropout()->set_rate(rate);
  return *this;
}
ModelBuilder& ModelBuilder::Flatten() {
  spec_->model.add_layers()->mutable_flatten();
  return *this;
}
ModelBuilder& ModelBuilder::Relu() {
  spec_->model.add_layers()->mutable_relu();
  return *this;
}
ModelBuilder& ModelBuilder::LeakyRelu(float alpha) {
  spec_->model.add_layers()->mutable_leaky_relu()->set_alpha(alpha);
  return *this;
}
ModelBuilder& ModelBuilder::Sigmoid() {
  spec_->model.add_layers()->mutable_sigmoid();
  return *this;
}
ModelBuilder& ModelBuilder::Tanh() {
  spec_->model.add_layers()->mutable_tanh();
  return *this;
}
ModelBuilder& ModelBuilder::Gelu() {
  spec_->model.add_layers()->mutable_gelu();
  return *this;
}

std::string ModelBuilder::ToYaml() const {
  v1::JobSpec job;
  *job.mutable_model() = spec_->model;
  return common::ProtoToYaml(job);
}

absl::StatusOr<Model> ModelBuilder::Build(const std::vector<int64_t>& input_shape, int num_classes,
                                          uint64_t seed) const {
  if (spec_->model.layers_size() == 0) {
    return absl::InvalidArgumentError("ModelBuilder: no layers (add at least Dense(num_classes))");
  }
  return yoke::Build(spec_->model, input_shape, num_classes, seed,
                     [](std::shared_ptr<Model::Impl> i) { return Model(std::move(i)); });
}

}  // namespace yoke
