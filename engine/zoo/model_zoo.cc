#include "engine/zoo/model_zoo.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/name_list.h"

namespace yoke::engine {
namespace {

using LayerList = std::vector<v1::LayerSpec>;

v1::LayerSpec Dense(int units) {
  v1::LayerSpec l;
  l.mutable_dense()->set_units(units);
  return l;
}
v1::LayerSpec Relu() {
  v1::LayerSpec l;
  l.mutable_relu();
  return l;
}
v1::LayerSpec Flatten() {
  v1::LayerSpec l;
  l.mutable_flatten();
  return l;
}
v1::LayerSpec Conv(int filters, int kernel, int stride = 1, bool bias = true) {
  v1::LayerSpec l;
  auto* c = l.mutable_conv2d();
  c->set_filters(filters);
  c->set_kernel(kernel);
  c->set_stride(stride);
  c->set_padding("same");
  c->set_no_bias(!bias);
  return l;
}
v1::LayerSpec MaxPool(int size, int stride, const std::string& padding = "valid") {
  v1::LayerSpec l;
  auto* p = l.mutable_max_pool2d();
  p->set_size(size);
  p->set_stride(stride);
  p->set_padding(padding);
  return l;
}

absl::StatusOr<LayerList> Mlp(const v1::ModelSpec& spec, const ZooShape& /*in*/, int k) {
  LayerList out{Flatten()};
  std::vector<int> hidden(spec.hidden().begin(), spec.hidden().end());
  if (hidden.empty()) hidden = {256, 128};
  for (size_t i = 0; i < hidden.size(); ++i) {
    out.push_back(Dense(hidden[i]));
    out.push_back(Relu());
    if (i == 0 && spec.dropout() > 0) {
      v1::LayerSpec d;
      d.mutable_dropout()->set_rate(spec.dropout());
      out.push_back(d);
    }
  }
  out.push_back(Dense(k));
  return out;
}

absl::StatusOr<LayerList> Cnn(const v1::ModelSpec& spec, const ZooShape& in, int k) {
  if (in.size() != 3 || in[0] < 4 || in[1] < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.zoo: cnn needs an image input (H, W, C) of at least 4x4, got ", ZooShapeString(in)));
  }
  LayerList out{Conv(32, 5),   Relu(),    MaxPool(2, 2), Conv(64, 5), Relu(),
                MaxPool(2, 2), Flatten(), Dense(1024),   Relu()};
  if (spec.dropout() > 0) {
    v1::LayerSpec d;
    d.mutable_dropout()->set_rate(spec.dropout());
    out.push_back(d);
  }
  out.push_back(Dense(k));
  return out;
}

}  // namespace

// Defined in model_zoo_resnet.cc.
absl::StatusOr<LayerList> ResNet(const v1::ModelSpec& spec, const ZooShape& in, int k, int depth);

namespace {

template <int kDepth>
absl::StatusOr<LayerList> ResNetOf(const v1::ModelSpec& spec, const ZooShape& in, int k) {
  return ResNet(spec, in, k, kDepth);
}

struct ZooEntry {
  std::string_view name;
  absl::StatusOr<LayerList> (*build)(const v1::ModelSpec& spec, const ZooShape& in, int k);
};

// One builder per name of kZooModels, in its order.
constexpr ZooEntry kZoo[] = {
    {"cnn", Cnn},
    {"mlp", Mlp},
    {"resnet18", ResNetOf<18>},
    {"resnet20", ResNetOf<20>},
    {"resnet32", ResNetOf<32>},
    {"resnet34", ResNetOf<34>},
    {"resnet44", ResNetOf<44>},
    {"resnet50", ResNetOf<50>},
    {"resnet56", ResNetOf<56>},
};
static_assert(common::NamesMatch(kZoo, kZooModels),
              "kZoo must build exactly kZooModels (engine/names/engine_names.h), in its order");

}  // namespace

std::string ZooShapeString(const ZooShape& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

absl::StatusOr<std::vector<v1::LayerSpec>> ExpandZoo(const v1::ModelSpec& spec,
                                                     const ZooShape& input_shape, int num_classes) {
  const std::string& z = spec.zoo();
  for (const ZooEntry& e : kZoo) {
    if (z == e.name) return e.build(spec, input_shape, num_classes);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model.zoo: unknown model '", z, "' (known: ", absl::StrJoin(ZooNames(), ", "), ")"));
}

}  // namespace yoke::engine
