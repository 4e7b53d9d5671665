// Model: pipeline stages (CreateStage, PipelineCuts) and activation sets.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/model.h"
#include "engine/registry.h"

namespace yoke::engine {
namespace {

// OK when the list may be cut before layer b; else what reaches across.
absl::Status CheckCut(const shapes::LayerPlan& plan, const std::string& path, int b) {
  const int n = static_cast<int>(plan.inputs.size());
  for (int j = b; j < n; ++j) {
    for (int src : plan.inputs[j]) {
      if (src >= b - 1) continue;
      const std::string what = src < 0 ? std::string("the model input")
                                       : absl::StrCat("layer ", src, " (", plan.names[src], ")");
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": cannot cut the model before layer ", b, " (", plan.names[b], "): layer ", j,
          " (", plan.names[j], ") reads ", what,
          " across the cut; a stage boundary must follow a layer whose output is the only one "
          "read later (between residual blocks, not inside one)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Layer>> Model::BuildAlone(const ExpandedLayers& e,
                                                         const Shape& input_shape, int i,
                                                         ParamSet* params) {
  ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer,
                   LayerRegistry::Global().Create(e.layers[i], Device::CPU()));
  layer->set_name(e.plan.names[i]);
  std::vector<Shape> in;
  for (int src : e.plan.inputs[i]) in.push_back(src < 0 ? input_shape : e.plan.shapes[src]);
  RETURN_IF_ERROR(common::Annotate(layer->Build(in, params).status(),
                                   absl::StrCat(e.path, "[", i, "] (", e.plan.names[i], ")")));
  return layer;
}

absl::StatusOr<std::unique_ptr<Model>> Model::CreateStage(const v1::ModelSpec& spec,
                                                          const Shape& input_shape, int num_classes,
                                                          int begin, int end, Device device) {
  ASSIGN_OR_RETURN(const ExpandedLayers e, Expand(spec, input_shape, num_classes));
  const int n = static_cast<int>(e.layers.size());
  if (begin < 0 || end > n || begin >= end) {
    return absl::InvalidArgumentError(absl::StrCat(e.path, ": a stage holds layers [", begin, ", ",
                                                   end,
                                                   "), which is not a non-empty "
                                                   "range of the model's ",
                                                   n, " layers"));
  }
  if (begin > 0) RETURN_IF_ERROR(CheckCut(e.plan, e.path, begin));
  if (end < n) RETURN_IF_ERROR(CheckCut(e.plan, e.path, end));
  return Build(e, input_shape, begin, end, device);
}

absl::StatusOr<Model::Cuts> Model::PipelineCuts(const v1::ModelSpec& spec, const Shape& input_shape,
                                                int num_classes) {
  ASSIGN_OR_RETURN(const ExpandedLayers e, Expand(spec, input_shape, num_classes));
  Cuts c;
  c.layers = static_cast<int>(e.layers.size());
  c.names = e.plan.names;
  c.cuts = shapes::CutPoints(e.plan.inputs);
  // Costs: each layer built alone into a set that is never allocated.
  ParamSet scratch;
  for (int i = 0; i < c.layers; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer, BuildAlone(e, input_shape, i, &scratch));
    c.macs.push_back(layer->ForwardMacsPerExample());
    c.output_elements.push_back(NumElements(e.plan.shapes[i]));
  }
  c.parameters = scratch.num_parameters();
  return c;
}

absl::Status Model::CountEarlierParams(const ExpandedLayers& e, const Shape& input_shape,
                                       int begin) {
  ParamSet scratch;  // declared into, never allocated
  for (int i = 0; i < begin; ++i) RETURN_IF_ERROR(BuildAlone(e, input_shape, i, &scratch).status());
  params_.set_init_offset(static_cast<int64_t>(scratch.entries().size()),
                          static_cast<int64_t>(scratch.state_entries().size()));
  return absl::OkStatus();
}

absl::Status Model::SetActivationSets(int k) {
  if (k < 1 || k > kMaxActivationSets) {
    return absl::InvalidArgumentError(
        absl::StrCat("activation sets: ", k, " is not in [1, ", kMaxActivationSets, "]"));
  }
  if (k > 1 && !device_.is_cpu()) {
    return absl::UnimplementedError(absl::StrCat(
        "several activation sets (micro-batches in flight) run on the CPU only; the model is on ",
        device_.ToString()));
  }
  if (k > 1 && reapply_) {
    return absl::FailedPreconditionError(
        "several activation sets (micro-batches in flight) with training.recompute_batch_norm: "
        "the recomputed outputs keep one forward's statistics");
  }
  if (k > 1 && recompute_) {
    return absl::FailedPreconditionError(
        "several activation sets (micro-batches in flight) with training.recompute: the "
        "recomputed outputs have one pool");
  }
  RETURN_IF_ERROR(SelectSet(0));
  if (k == 1) {
    sets_.clear();
    return absl::OkStatus();
  }
  sets_.resize(k);
  return absl::OkStatus();
}

absl::Status Model::SelectSet(int s) {
  const int k = activation_sets();
  if (s < 0 || s >= k) {
    return absl::InvalidArgumentError(absl::StrCat("activation set ", s,
                                                   " is out of range: the model keeps ", k,
                                                   " (Model::SetActivationSets)"));
  }
  if (s == current_set_) return absl::OkStatus();
  ActivationSet& away = sets_[current_set_];
  away.outs.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) away.outs[i] = std::move(nodes_[i].out);
  away.input = std::move(input_);
  away.batch = batch_;
  away.eval = last_forward_eval_;
  ActivationSet& in = sets_[s];
  in.outs.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i].out = std::move(in.outs[i]);
  input_ = std::move(in.input);
  batch_ = in.batch;
  last_forward_eval_ = in.eval;
  current_set_ = s;
  return absl::OkStatus();
}

}  // namespace yoke::engine
