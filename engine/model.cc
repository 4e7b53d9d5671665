#include "engine/model.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "engine/kernels/cpu/conv.h"
#include "engine/memory_plan.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"
#include "engine/zoo/model_zoo.h"

namespace yoke::engine {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const v1::ModelSpec& spec,
                                                     const Shape& input_shape, int num_classes,
                                                     Device device) {
  ASSIGN_OR_RETURN(const ExpandedLayers e, Expand(spec, input_shape, num_classes));
  return Build(e, input_shape, 0, static_cast<int>(e.layers.size()), device);
}

absl::StatusOr<Model::ExpandedLayers> Model::Expand(const v1::ModelSpec& spec,
                                                    const Shape& input_shape, int num_classes) {
  ExpandedLayers e;
  e.path = "model.layers";
  if (!spec.zoo().empty()) {
    ASSIGN_OR_RETURN(e.layers, ExpandZoo(spec, input_shape, num_classes));
    e.path = absl::StrCat("model.zoo(", spec.zoo(), ").layers");
  } else {
    e.layers.assign(spec.layers().begin(), spec.layers().end());
  }
  // Every rule of the list (arguments, names, inputs, each layer's shape,
  // outputs nobody reads, the logits) is checked here first, by the code job
  // validation runs at submit (engine/shapes/), so the two cannot disagree.
  ASSIGN_OR_RETURN(e.plan, shapes::PlanLayers(e.layers, e.path, input_shape, num_classes));
  return e;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Build(const ExpandedLayers& e,
                                                    const Shape& input_shape, int begin, int end,
                                                    Device device) {
  const std::vector<v1::LayerSpec>& layers = e.layers;
  const shapes::LayerPlan& plan = e.plan;
  std::unique_ptr<Model> m(new Model());
  // A stage after the first reads the output of layer begin - 1 as its input
  // and hands back that input's gradient.
  m->input_shape_ = begin == 0 ? input_shape : plan.shapes[begin - 1];
  m->input_grad_on_ = begin > 0;
  m->device_ = device;
  // A device the build has no backend for fails here, before any layer.
  ASSIGN_OR_RETURN(m->backend_, BackendFor(device));
  if (begin > 0) RETURN_IF_ERROR(m->CountEarlierParams(e, input_shape, begin));
  for (int i = begin; i < end; ++i) {
    const std::string where = absl::StrCat(e.path, "[", i, "] (", plan.names[i], ")");
    auto layer_or = LayerRegistry::Global().Create(layers[i], device);
    if (!layer_or.ok()) return common::Annotate(layer_or.status(), where);
    Node node;
    node.layer = std::move(layer_or).value();
    node.layer->set_name(plan.names[i]);
    node.layer->set_index(i);  // the whole model's index: RNG streams match
    // Layer begin - 1 is the stage's input (-1); the rest shift by begin.
    for (int src : plan.inputs[i]) node.inputs.push_back(src < begin ? -1 : src - begin);
    std::vector<Shape> in_shapes;
    for (int src : node.inputs) {
      in_shapes.push_back(src < 0 ? m->input_shape_ : m->nodes_[src].shape);
      if (src >= 0) m->nodes_[src].consumers++;
    }
    const size_t params_before = m->params_.entries().size();
    auto shape_or = node.layer->Build(in_shapes, &m->params_);
    if (!shape_or.ok()) return common::Annotate(shape_or.status(), where);
    node.needs_grad = m->params_.entries().size() > params_before;
    node.param_begin = static_cast<int>(params_before);
    node.param_end = static_cast<int>(m->params_.entries().size());
    for (int src : node.inputs) {
      if (src < 0 ? m->input_grad_on_ : m->nodes_[src].needs_grad) node.needs_grad = true;
    }
    node.shape = *shape_or;
    m->nodes_.push_back(std::move(node));
  }
  m->FuseActivations();
  const char* plan_env = std::getenv("YOKE_MEMORY_PLAN");
  m->memory_plan_on_ = plan_env == nullptr || std::string(plan_env) != "0";
  m->ShareJoinBuffers();
  m->PlanEvalBuffers();
  m->PlanGradBuffers();
  RETURN_IF_ERROR(m->params_.Finalize(device));
  return m;
}

absl::StatusOr<int> Model::UseBf16(bool on) {
  if (on && !device_.is_cpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat("bf16 on the CPU engine only; this model is on ", device_.ToString()));
  }
  if (on && !cpu::CpuHasNativeBf16()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "training.precision: bf16 needs a CPU with AVX-512 BF16 or AMX, and oneDNN finds ",
        cpu::CpuIsaName(), " here (bf16 emulated would run slower than fp32); use fp32"));
  }
  int layers = 0;
  for (Node& node : nodes_) layers += node.layer->UseBf16(on) ? 1 : 0;
  bf16_ = on;
  return on ? layers : 0;
}

void Model::FuseActivations() {
  // The device layers fuse nothing yet: each runs its own kernels.
  if (!device_.is_cpu()) return;
  const char* env = std::getenv("YOKE_FUSE");
  if (env != nullptr && std::string(env) == "0") return;
  for (Node& node : nodes_) {
    if (std::string(node.layer->type()) != "relu" || node.inputs.size() != 1) continue;
    const int src = node.inputs[0];
    // The producer's output must feed this ReLU alone: another consumer would
    // read the activation instead of the value it asked for.
    if (src < 0 || nodes_[src].consumers != 1) continue;
    node.fused = nodes_[src].layer->FuseRelu();
  }
  // Backward: a ReLU read by one layer that folds the ReLU's backward into its
  // own. That consumer's input gradient becomes the ReLU input's.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    if (std::string(node.layer->type()) != "relu" || node.inputs.size() != 1 ||
        node.inputs[0] < 0 || node.consumers != 1) {
      continue;
    }
    for (size_t j = i + 1; j < nodes_.size(); ++j) {
      const std::vector<int>& in = nodes_[j].inputs;
      if (std::find(in.begin(), in.end(), static_cast<int>(i)) == in.end()) continue;
      node.backward_fused = in.size() == 1 && nodes_[j].layer->FuseReluBackward();
      break;
    }
  }
  // producer -> ReLU (applied by the producer, its backward run by the pool)
  // -> 2x2 max pool: the producer may compute the pool too, when nothing
  // needs the gradient of its input (it would need the full-size gradient).
  for (size_t p = 0; p < nodes_.size(); ++p) {
    Node& pool = nodes_[p];
    if (!pool.layer->IsTiledMaxPool2x2() || pool.inputs.size() != 1 || pool.inputs[0] < 0) {
      continue;
    }
    const Node& relu = nodes_[pool.inputs[0]];
    if (!relu.fused || !relu.backward_fused || relu.consumers != 1) continue;
    Node& producer = nodes_[relu.inputs[0]];
    if (producer.inputs.size() != 1) continue;
    const int src = producer.inputs[0];
    if (src < 0 ? input_grad_on_ : nodes_[src].needs_grad) continue;
    if (producer.layer->AbsorbMaxPool2x2()) {
      producer.writes_into = static_cast<int>(p);
      pool.absorbed = true;
    }
  }
}

void Model::ShareJoinBuffers() {
  if (!device_.is_cpu() || !memory_plan_on_) return;
  const std::vector<int> owner = BufferOwners();
  for (Node& node : nodes_) {
    if (!node.layer->MayOverwriteInput()) continue;
    for (int src : node.inputs) {
      // The input must own its buffer (not a fused ReLU's or an absorbed
      // pool's), feed only this join, and be read by no Backward: the
      // join's own reads neither input, and the input's reads no output.
      if (src < 0 || owner[src] != src || nodes_[src].consumers != 1 ||
          nodes_[src].layer->BackwardReadsOutput()) {
        continue;
      }
      node.overwrites = src;
      break;
    }
  }
}

bool Model::TakesInputBuffer(const Node& node) const { return node.overwrites >= 0 && !recompute_; }

int Model::GradTarget(int src) const {
  return src >= 0 && nodes_[src].backward_fused ? nodes_[src].inputs[0] : src;
}

absl::Status Model::EnsureBuffers(int64_t n) {
  if (n == batch_) return absl::OkStatus();
  batch_ = -1;  // until every buffer has the new size
  // The old size's buffers go first, all of them, before any new one. With
  // several activation sets, the gradient buffers are shared by sets of
  // different sizes and stay (EnsureGradBuffers grows them).
  const bool one_set = sets_.size() <= 1;
  if (one_set) {
    grad_slots_.clear();
    grad_batch_ = -1;
  }
  pool_ = Tensor();
  resident_segment_ = -1;
  for (Node& node : nodes_) {
    node.out = Tensor();
    if (!one_set) continue;
    node.grad = Tensor();  // allocated by the first Backward at this size
    node.grad_scratch.clear();
  }
  if (recompute_ && pool_elements_ > 0) {
    ASSIGN_OR_RETURN(pool_, Tensor::Allocate({pool_elements_ * n}, DType::kF32, device_,
                                             "the recomputed activations' pool"));
  }
  reapply_slots_.clear();
  for (int64_t e : reapply_plan_.slot_elements) {
    ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate({e * n}, DType::kF32, device_,
                                                "the recomputed batch norm outputs' slot"));
    reapply_slots_.push_back(std::move(t));
  }
  std::fill(reapply_holder_.begin(), reapply_holder_.end(), -1);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    Shape s = node.shape;
    s.insert(s.begin(), n);
    if (node.pool_offset >= 0 && pool_.defined()) {
      node.out = pool_.View(node.pool_offset * n, s);
      continue;
    }
    if (!reapply_slots_.empty() && reapply_slot_[i] >= 0) {
      node.out = reapply_slots_[reapply_slot_[i]].View(0, s);
      continue;
    }
    if (node.fused) {
      node.out = nodes_[node.inputs[0]].out;  // an earlier node: already sized
      continue;
    }
    if (TakesInputBuffer(node)) {
      node.out = nodes_[node.overwrites].out;  // the same shape: a join's
      continue;
    }
    if (node.writes_into >= 0) continue;  // it writes the pool's buffer
    ASSIGN_OR_RETURN(node.out, Tensor::Allocate(s, DType::kF32, device_,
                                                absl::StrCat("layer ", node.layer->name())));
  }
  batch_ = n;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Model::Forward(const Tensor& x, const LayerContext& ctx) {
  if (x.rank() != static_cast<int>(input_shape_.size()) + 1 ||
      !std::equal(input_shape_.begin(), input_shape_.end(), x.shape().begin() + 1)) {
    return absl::InvalidArgumentError(absl::StrCat("model input must be (N, ",
                                                   ShapeString(input_shape_).substr(1), ", got ",
                                                   ShapeString(x.shape())));
  }
  if (x.device() != device_) {
    return absl::InvalidArgumentError(absl::StrCat("model input is on ", x.device().ToString(),
                                                   ", the model on ", device_.ToString()));
  }
  RETURN_IF_ERROR(SelectSet(ctx.activation_set));
  const bool planned = !ctx.training && memory_plan_on_;
  if (planned) {
    RETURN_IF_ERROR(EnsureEvalBuffers(x.dim(0)));
  } else {
    RETURN_IF_ERROR(EnsureBuffers(x.dim(0)));
  }
  auto out_of = [&](int i) -> Tensor& { return planned ? eval_out_[i] : nodes_[i].out; };
  input_ = x;
  last_forward_eval_ = !ctx.training;
  std::vector<const Tensor*> in;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    Node& node = nodes_[i];
    if (node.fused || node.absorbed) continue;  // its producer wrote the output
    in.clear();
    for (int src : node.inputs) in.push_back(src < 0 ? &input_ : &out_of(src));
    Tensor* out = node.writes_into >= 0 ? &out_of(node.writes_into) : &out_of(i);
    const auto t0 = profiling_ ? Clock::now() : Clock::time_point();
    absl::Status s = node.layer->Forward(in, out, ctx);
    if (!s.ok()) return common::Annotate(s, node.layer->name());
    if (profiling_) node.forward_s += std::chrono::duration<double>(Clock::now() - t0).count();
    if (!planned && !reapply_holder_.empty() && reapply_slot_[i] >= 0) {
      reapply_holder_[reapply_slot_[i]] = i;
    }
  }
  // The pool holds the last segment's outputs (training.recompute).
  if (!planned && recompute_) resident_segment_ = nodes_.back().segment;
  return out_of(static_cast<int>(nodes_.size()) - 1);
}

absl::Status Model::Backward(const Tensor& dlogits, const LayerContext& ctx,
                             const GradReadyFn& on_grad_ready) {
  RETURN_IF_ERROR(SelectSet(ctx.activation_set));
  if (batch_ < 0 || last_forward_eval_) {
    return absl::FailedPreconditionError(
        "Backward needs a training Forward (LayerContext::training) just before it; the last "
        "Forward ran in evaluation mode or there was none");
  }
  Node& last = nodes_.back();
  // Evaluation-only Forwards never pay for gradient buffers.
  if (!last.grad.defined() || grad_batch_ != batch_) RETURN_IF_ERROR(EnsureGradBuffers());
  if (dlogits.device() != device_) {
    return absl::InvalidArgumentError(absl::StrCat("dlogits are on ", dlogits.device().ToString(),
                                                   ", the model on ", device_.ToString()));
  }
  if (dlogits.numel() != last.out.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("dlogits ", ShapeString(dlogits.shape()),
                                                   " does not match the logits ",
                                                   ShapeString(last.out.shape())));
  }
  RETURN_IF_ERROR(CopyTensor(last.grad, dlogits.Reshape(last.grad.shape())));
  for (Node& node : nodes_) node.grads_received = 0;
  last.grads_received = 1;
  int input_grads_received = 0;

  // A node feeding k consumers receives k gradients: the first overwrites its
  // grad buffer directly; later ones go through a scratch tensor (planned, or
  // allocated here without the plan) and are added.
  std::vector<const Tensor*> in;
  std::vector<Tensor*> din;
  std::vector<Tensor> scratch;
  for (int i = static_cast<int>(nodes_.size()) - 1; i >= 0; --i) {
    Node& node = nodes_[i];
    // Entering a segment whose outputs the pool no longer holds: run its
    // Forward again (training.recompute).
    const int seg = node.last_of_segment;
    if (recompute_ && seg >= 0 && seg != resident_segment_ && recomputed_[seg]) {
      RETURN_IF_ERROR(RecomputeSegment(seg, ctx));
    }
    if (!node.needs_grad) continue;     // nothing upstream learns
    if (node.backward_fused) continue;  // its consumer ran its backward
    if (node.absorbed) continue;        // its producer runs its backward
    in.clear();
    din.clear();
    scratch.clear();
    scratch.reserve(node.inputs.size());
    for (size_t j = 0; j < node.inputs.size(); ++j) {
      const int input = node.inputs[j];
      in.push_back(input < 0 ? &input_ : &nodes_[input].out);
      const int src = GradTarget(input);
      if (src < 0 && input_grad_on_) {
        // A stage's input: its gradient goes back to the stage before.
        din.push_back(input_grads_received++ == 0 ? &input_grad_ : &input_grad_scratch_);
      } else if (src < 0 || !nodes_[src].needs_grad) {
        din.push_back(nullptr);
      } else if (nodes_[src].grads_received++ == 0) {
        // Counted here, not after the layer ran: a layer reading one node
        // twice (add(a, a)) sends its second gradient to scratch.
        din.push_back(&nodes_[src].grad);
      } else if (memory_plan_on_) {
        if (j >= node.grad_scratch.size() || !node.grad_scratch[j].defined()) {
          return absl::InternalError(absl::StrCat("layer ", node.layer->name(), " input ", j,
                                                  ": no planned gradient scratch buffer"));
        }
        din.push_back(&node.grad_scratch[j]);
      } else {
        ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(nodes_[src].grad.shape(), DType::kF32, device_,
                                                    absl::StrCat("the gradient of layer ",
                                                                 nodes_[src].layer->name())));
        scratch.push_back(std::move(t));
        din.push_back(&scratch.back());
      }
    }
    RETURN_IF_ERROR(ReapplyFor(i, ctx));  // training.recompute_batch_norm
    const auto t0 = profiling_ ? Clock::now() : Clock::time_point();
    const Node& outs = node.writes_into >= 0 ? nodes_[node.writes_into] : node;
    RETURN_IF_ERROR(common::Annotate(node.layer->Backward(in, outs.out, outs.grad, din, ctx),
                                     node.layer->name()));
    if (profiling_) node.backward_s += std::chrono::duration<double>(Clock::now() - t0).count();
    if (on_grad_ready) {
      for (int p = node.param_begin; p < node.param_end; ++p) on_grad_ready(p);
    }
    for (size_t j = 0; j < node.inputs.size(); ++j) {
      const int src = GradTarget(node.inputs[j]);
      if (din[j] == nullptr) continue;
      Tensor& target = src < 0 ? input_grad_ : nodes_[src].grad;
      if (din[j] != &target) {
        float* dst = target.data<float>();
        const float* add = din[j]->data<float>();
        const int64_t n = target.numel();
        if (backend_ != nullptr) {
          RETURN_IF_ERROR(backend_->AddInPlace(dst, add, n, device_.index));
        } else {
#pragma omp parallel for simd if (n > 65536)
          for (int64_t e = 0; e < n; ++e) dst[e] += add[e];
        }
      }
    }
  }
  return absl::OkStatus();
}

std::string Model::TypeLabel(const Node& n) {
  if (n.absorbed) return absl::StrCat(n.layer->type(), " (fused)");
  if (n.writes_into >= 0) return absl::StrCat(n.layer->type(), " (+pool)");
  if (n.fused && n.backward_fused) return absl::StrCat(n.layer->type(), " (fused)");
  if (n.fused) return absl::StrCat(n.layer->type(), " (fused fwd)");
  if (n.backward_fused) return absl::StrCat(n.layer->type(), " (fused bwd)");
  return n.layer->type();
}

void Model::set_profiling(bool on) {
  if (on && !profiling_) {
    for (Node& node : nodes_) node.forward_s = node.backward_s = 0;
  }
  profiling_ = on;
}

std::vector<Model::LayerTime> Model::layer_times() const {
  std::vector<LayerTime> out;
  for (const Node& n : nodes_) {
    out.push_back({n.layer->name(), TypeLabel(n), n.forward_s, n.backward_s});
  }
  return out;
}

int64_t Model::ForwardMacsPerExample() const {
  int64_t macs = 0;
  for (const Node& n : nodes_) macs += n.layer->ForwardMacsPerExample();
  return macs;
}

std::string Model::Summary() const {
  std::string s;
  for (const Node& n : nodes_) {
    int64_t count = 0;
    for (const auto& e : params_.entries()) {
      if (e.name.rfind(n.layer->name() + "/", 0) == 0) count += NumElements(e.shape);
    }
    absl::StrAppendFormat(&s, "  %-20s %-18s %-18s %10d\n", n.layer->name(), TypeLabel(n),
                          ShapeString(n.shape), count);
  }
  absl::StrAppendFormat(&s, "  total parameters: %d\n", params_.num_parameters());
  return s;
}

}  // namespace yoke::engine
