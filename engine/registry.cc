#include "engine/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {

LayerRegistry& LayerRegistry::Global() {
  static LayerRegistry* r = new LayerRegistry();
  return *r;
}

bool LayerRegistry::Register(const std::string& name, LayerFactory factory, Device::Kind kind) {
  factories_.push_back(Entry{name, kind, std::move(factory)});
  return true;
}

std::vector<std::string> LayerRegistry::Names(Device::Kind kind) const {
  std::vector<std::string> names;
  for (const auto& f : factories_) {
    if (f.kind == kind) names.push_back(f.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string LayerKindName(const v1::LayerSpec& spec) { return shapes::KindName(spec); }

absl::Status CheckArguments(const v1::LayerSpec& spec) {
  const std::vector<std::string> errors = shapes::ArgumentErrors(spec);
  return errors.empty() ? absl::OkStatus() : absl::InvalidArgumentError(errors[0]);
}

absl::StatusOr<std::unique_ptr<Layer>> LayerRegistry::Create(const v1::LayerSpec& spec,
                                                             Device device) const {
  std::string kind = LayerKindName(spec);
  if (kind.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer has no type (known: ", absl::StrJoin(Names(), ", "), ")"));
  }
  bool known = false;
  for (const auto& f : factories_) {
    if (f.name != kind) continue;
    if (f.kind == device.kind) return f.factory(spec);
    known = true;
  }
  if (known) {
    return absl::UnimplementedError(absl::StrCat("layer '", kind, "' has no ",
                                                 device.is_cpu() ? "cpu" : "cuda",
                                                 " implementation in this build"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown layer type '", kind, "' (known: ", absl::StrJoin(Names(), ", "), ")"));
}

}  // namespace yoke::engine
