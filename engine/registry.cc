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

bool LayerRegistry::Register(const std::string& name, LayerFactory factory) {
  factories_.emplace_back(name, std::move(factory));
  return true;
}

std::vector<std::string> LayerRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& f : factories_) names.push_back(f.first);
  std::sort(names.begin(), names.end());
  return names;
}

std::string LayerKindName(const v1::LayerSpec& spec) { return shapes::KindName(spec); }

absl::Status CheckArguments(const v1::LayerSpec& spec) {
  const std::vector<std::string> errors = shapes::ArgumentErrors(spec);
  return errors.empty() ? absl::OkStatus() : absl::InvalidArgumentError(errors[0]);
}

absl::StatusOr<std::unique_ptr<Layer>> LayerRegistry::Create(const v1::LayerSpec& spec) const {
  std::string kind = LayerKindName(spec);
  if (kind.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer has no type (known: ", absl::StrJoin(Names(), ", "), ")"));
  }
  for (const auto& f : factories_) {
    if (f.first == kind) return f.second(spec);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown layer type '", kind, "' (known: ", absl::StrJoin(Names(), ", "), ")"));
}

}  // namespace yoke::engine
