#include "engine/shapes/layer_shapes.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/quote.h"

namespace yoke::engine::shapes {
namespace {

using Shapes = std::vector<LayerShape>;

std::string FirstInput(const Shapes& in) {
  return in.empty() ? std::string("none") : ShapeText(in[0]);
}

// The argument rules, in the words job validation has always used.
void Positive(std::vector<std::string>* out, const std::string& field, int64_t v) {
  if (!(v > 0)) out->push_back(absl::StrCat(field, ": must be > 0, got ", v));
}
void NonNegative(std::vector<std::string>* out, const std::string& field, int64_t v) {
  if (!(v >= 0)) out->push_back(absl::StrCat(field, ": must be >= 0, got ", v));
}
void Padding(std::vector<std::string>* out, const std::string& field, const std::string& v) {
  if (v.empty() || v == "same" || v == "valid") return;
  out->push_back(
      absl::StrCat(field, ": unknown padding ", common::Quote(v), " (known: same, valid)"));
}
void Pool(std::vector<std::string>* out, const std::string& kind, const v1::Pool2dSpec& p) {
  NonNegative(out, kind + ".size", p.size());
  NonNegative(out, kind + ".stride", p.stride());
  Padding(out, kind + ".padding", p.padding());
}

std::string KindNames() {
  const auto* o = v1::LayerSpec::descriptor()->FindOneofByName("kind");
  std::vector<std::string> names;
  for (int i = 0; i < o->field_count(); ++i) names.push_back(o->field(i)->name());
  std::sort(names.begin(), names.end());
  return absl::StrJoin(names, ", ");
}

}  // namespace

std::string ShapeText(const LayerShape& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

int64_t Elements(const LayerShape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string KindName(const v1::LayerSpec& spec) {
  if (spec.kind_case() == v1::LayerSpec::KIND_NOT_SET) return "";
  const auto* field = v1::LayerSpec::descriptor()->FindFieldByNumber(spec.kind_case());
  return field == nullptr ? "" : field->name();
}

std::vector<std::string> ArgumentErrors(const v1::LayerSpec& spec) {
  using L = v1::LayerSpec;
  std::vector<std::string> out;
  switch (spec.kind_case()) {
    case L::kDense:
      Positive(&out, "dense.units", spec.dense().units());
      break;
    case L::kConv2D:
      Positive(&out, "conv2d.filters", spec.conv2d().filters());
      Positive(&out, "conv2d.kernel", spec.conv2d().kernel());
      NonNegative(&out, "conv2d.stride", spec.conv2d().stride());
      Padding(&out, "conv2d.padding", spec.conv2d().padding());
      break;
    case L::kMaxPool2D:
      Pool(&out, "max_pool2d", spec.max_pool2d());
      break;
    case L::kAvgPool2D:
      Pool(&out, "avg_pool2d", spec.avg_pool2d());
      break;
    case L::kBatchNorm: {
      const float m = spec.batch_norm().momentum();
      const float e = spec.batch_norm().epsilon();
      if (!(m >= 0 && m <= 1)) {
        out.push_back(absl::StrCat("batch_norm.momentum: must be in [0, 1], got ", m));
      }
      if (!std::isfinite(e) || e < 0) {
        out.push_back(absl::StrCat("batch_norm.epsilon: must be finite and >= 0, got ", e));
      }
      break;
    }
    case L::kDropout: {
      const float r = spec.dropout().rate();
      if (!(r >= 0 && r < 1))
        out.push_back(absl::StrCat("dropout.rate: must be in [0, 1), got ", r));
      break;
    }
    case L::kLeakyRelu:
      if (!std::isfinite(spec.leaky_relu().alpha())) {
        out.push_back(
            absl::StrCat("leaky_relu.alpha: must be finite, got ", spec.leaky_relu().alpha()));
      }
      break;
    default:
      break;  // the parameterless kinds, and no kind at all
  }
  return out;
}

Window Conv2dWindow(const v1::Conv2dSpec& c) {
  return {c.kernel(), c.stride() == 0 ? 1 : c.stride(), c.padding() != "valid"};
}

Window Pool2dWindow(const v1::Pool2dSpec& p) {
  const int64_t size = p.size() == 0 ? 2 : p.size();
  return {size, p.stride() == 0 ? size : p.stride(), p.padding() == "same"};
}

float LeakyReluAlpha(const v1::LeakyReluSpec& s) { return s.alpha() == 0.0f ? 0.01f : s.alpha(); }
float BatchNormMomentum(const v1::BatchNormSpec& s) {
  return s.momentum() == 0 ? 0.1f : s.momentum();
}
float BatchNormEpsilon(const v1::BatchNormSpec& s) {
  return s.epsilon() == 0 ? 1e-5f : s.epsilon();
}

Padding1d ComputePadding(int64_t in, int64_t window, int64_t stride, bool same) {
  Padding1d p;
  if (same) {
    p.out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>((p.out - 1) * stride + window - in, 0);
    p.before = total / 2;
    p.after = total - p.before;
  } else {
    p.out = in >= window ? (in - window) / stride + 1 : 0;
  }
  return p;
}

absl::StatusOr<LayerShape> DenseOutput(const Shapes& in, int64_t units) {
  if (in.size() != 1 || in[0].size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense expects 1 input of rank 1 (features), got ", FirstInput(in),
                     "; add a flatten layer before it"));
  }
  return LayerShape{units};
}

absl::StatusOr<LayerShape> Conv2dOutput(const Shapes& in, int64_t filters, const Window& w) {
  if (in.size() != 1 || in[0].size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("conv2d expects 1 input of rank 3 (H, W, C), got ", FirstInput(in)));
  }
  const Padding1d ph = ComputePadding(in[0][0], w.size, w.stride, w.same);
  const Padding1d pw = ComputePadding(in[0][1], w.size, w.stride, w.same);
  if (ph.out <= 0 || pw.out <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "conv2d: a ", w.size, "x", w.size, " window with padding 'valid' does not fit input ",
        ShapeText(in[0]), "; use padding 'same' or a smaller kernel"));
  }
  return LayerShape{ph.out, pw.out, filters};
}

absl::StatusOr<LayerShape> Pool2dOutput(const std::string& type, const Shapes& in,
                                        const Window& w) {
  if (in.size() != 1 || in[0].size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(type, " expects 1 input of rank 3 (H, W, C), got ", FirstInput(in)));
  }
  const Padding1d ph = ComputePadding(in[0][0], w.size, w.stride, w.same);
  const Padding1d pw = ComputePadding(in[0][1], w.size, w.stride, w.same);
  if (ph.out <= 0 || pw.out <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        type, ": a ", w.size, "x", w.size, " window with padding 'valid' does not fit input ",
        ShapeText(in[0]), "; use padding 'same' or a smaller size"));
  }
  return LayerShape{ph.out, pw.out, in[0][2]};
}

absl::StatusOr<LayerShape> GlobalAvgPoolOutput(const Shapes& in) {
  if (in.size() != 1 || in[0].size() != 3 || in[0][0] * in[0][1] == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_avg_pool expects 1 input of rank 3 (H, W, C), got ", FirstInput(in)));
  }
  return LayerShape{in[0][2]};
}

absl::StatusOr<LayerShape> FlattenOutput(const Shapes& in) {
  if (in.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("flatten expects 1 input, got ", in.size()));
  }
  return LayerShape{Elements(in[0])};
}

absl::StatusOr<LayerShape> BatchNormOutput(const Shapes& in) {
  if (in.size() != 1 || in[0].empty() || Elements(in[0]) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_norm expects 1 input with a channel (last) dimension, e.g. (H, W, C) "
                     "or (C), got ",
                     FirstInput(in)));
  }
  return in[0];
}

absl::StatusOr<LayerShape> SoftmaxOutput(const Shapes& in) {
  if (in.size() != 1 || in[0].empty() || in[0].back() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("softmax expects 1 input of rank >= 1 with a non-empty last dimension, got ",
                     FirstInput(in)));
  }
  return in[0];
}

absl::StatusOr<LayerShape> AddOutput(const Shapes& in) {
  if (in.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("add expects 2 or more inputs, got ", in.size()));
  }
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i] != in[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("add expects inputs of identical shape: input 0 is ", ShapeText(in[0]),
                       " but input ", i, " is ", ShapeText(in[i])));
    }
  }
  return in[0];
}

absl::StatusOr<LayerShape> ElementwiseOutput(const std::string& type, const Shapes& in) {
  if (in.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(type, " expects 1 input, got ", in.size()));
  }
  return in[0];
}

absl::StatusOr<LayerShape> OutputShape(const v1::LayerSpec& spec, const Shapes& in) {
  using L = v1::LayerSpec;
  switch (spec.kind_case()) {
    case L::kDense:
      return DenseOutput(in, spec.dense().units());
    case L::kConv2D:
      return Conv2dOutput(in, spec.conv2d().filters(), Conv2dWindow(spec.conv2d()));
    case L::kMaxPool2D:
      return Pool2dOutput("max_pool2d", in, Pool2dWindow(spec.max_pool2d()));
    case L::kAvgPool2D:
      return Pool2dOutput("avg_pool2d", in, Pool2dWindow(spec.avg_pool2d()));
    case L::kGlobalAvgPool:
      return GlobalAvgPoolOutput(in);
    case L::kFlatten:
      return FlattenOutput(in);
    case L::kBatchNorm:
      return BatchNormOutput(in);
    case L::kSoftmax:
      return SoftmaxOutput(in);
    case L::kAdd:
      return AddOutput(in);
    case L::KIND_NOT_SET:
      return absl::InvalidArgumentError(
          absl::StrCat("layer has no type (known: ", KindNames(), ")"));
    default:
      return ElementwiseOutput(KindName(spec), in);
  }
}

namespace {

// A std::vector or a RepeatedPtrField of LayerSpec.
template <typename List>
absl::StatusOr<LayerPlan> Plan(const List& layers, const std::string& path,
                               const std::optional<LayerShape>& input, int num_classes) {
  if (layers.empty()) {
    return absl::InvalidArgumentError("model: needs a zoo entry or a non-empty layers list");
  }
  LayerPlan plan;
  const size_t n = static_cast<size_t>(layers.size());
  plan.names.reserve(n);  // by_name's keys point into it: it must not move
  plan.inputs.reserve(n);
  if (input.has_value()) plan.shapes.reserve(n);
  absl::flat_hash_map<absl::string_view, int> by_name;
  by_name.reserve(n);
  std::vector<int> consumers(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const v1::LayerSpec& ls = layers[static_cast<int>(i)];
    // Built only for a message: a list may hold hundreds of thousands of layers.
    auto where = [&] { return absl::StrCat(path, "[", i, "]"); };
    const std::string kind = KindName(ls);
    if (kind.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": layer has no type (known: ", KindNames(), ")"));
    }
    if (const std::vector<std::string> bad = ArgumentErrors(ls); !bad.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": ", bad[0]));
    }
    std::string name = ls.name().empty() ? absl::StrCat(kind, "_", i) : ls.name();
    if (name == "input" || by_name.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ".name: ", common::Quote(name), " is already taken"));
    }
    std::vector<int> inputs;
    if (ls.inputs().empty()) {
      inputs.push_back(static_cast<int>(i) - 1);
    } else {
      for (int j = 0; j < ls.inputs_size(); ++j) {
        const std::string& in = ls.inputs(j);
        if (in == "input") {
          inputs.push_back(-1);
        } else if (auto it = by_name.find(in); it != by_name.end()) {
          inputs.push_back(it->second);
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ".inputs[", j, "]: no earlier layer named ", common::Quote(in),
                           " (a layer may read 'input' or layers listed before it)"));
        }
      }
    }
    for (int src : inputs) {
      if (src >= 0) consumers[src]++;
    }
    if (input.has_value()) {
      Shapes in_shapes;
      for (int src : inputs) in_shapes.push_back(src < 0 ? *input : plan.shapes[src]);
      auto shape = OutputShape(ls, in_shapes);
      if (!shape.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), " (", name, "): ", shape.status().message()));
      }
      plan.shapes.push_back(*std::move(shape));
    }
    plan.names.push_back(std::move(name));
    by_name[plan.names.back()] = static_cast<int>(i);
    plan.inputs.push_back(std::move(inputs));
  }
  for (size_t i = 0; i + 1 < n; ++i) {
    if (consumers[i] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, "[", i, "] (", plan.names[i],
                       "): its output is never used; only the last layer may be unconsumed"));
    }
  }
  if (input.has_value() && num_classes >= 0) {
    const LayerShape& out = plan.shapes.back();
    if (out.size() != 1 || out[0] != num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the last layer must output (", num_classes,
                       ") logits, one per class; it outputs ", ShapeText(out)));
    }
  }
  return plan;
}

}  // namespace

absl::StatusOr<LayerPlan> PlanLayers(const std::vector<v1::LayerSpec>& layers,
                                     const std::string& path,
                                     const std::optional<LayerShape>& input, int num_classes) {
  return Plan(layers, path, input, num_classes);
}

absl::StatusOr<LayerPlan> PlanLayers(
    const google::protobuf::RepeatedPtrField<v1::LayerSpec>& layers, const std::string& path,
    const std::optional<LayerShape>& input, int num_classes) {
  return Plan(layers, path, input, num_classes);
}

std::vector<int> CutPoints(const std::vector<std::vector<int>>& inputs) {
  const int n = static_cast<int>(inputs.size());
  // min_input[j]: the smallest layer index read by layer j or any later one.
  std::vector<int> min_input(n + 1, n);
  for (int j = n - 1; j >= 0; --j) {
    min_input[j] = min_input[j + 1];
    for (int src : inputs[j]) min_input[j] = std::min(min_input[j], src);
  }
  std::vector<int> cuts;
  for (int b = 1; b < n; ++b) {
    if (min_input[b] >= b - 1) cuts.push_back(b);
  }
  return cuts;
}

}  // namespace yoke::engine::shapes
