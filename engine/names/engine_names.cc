#include "engine/names/engine_names.h"

#include "common/name_list.h"

namespace yoke::engine {

const std::vector<std::string>& ZooNames() {
  static const auto* names = new std::vector<std::string>(common::NameVector(kZooModels));
  return *names;
}

const std::vector<std::string>& KnownOptimizers() {
  static const auto* names = new std::vector<std::string>(common::NameVector(kOptimizers));
  return *names;
}

const std::vector<std::string>& KnownSchedules() {
  static const auto* names = new std::vector<std::string>(common::NameVector(kSchedules));
  return *names;
}

}  // namespace yoke::engine
