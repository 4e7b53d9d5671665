#include "data/names/format_names.h"

#include "common/name_list.h"

namespace yoke::data {

const std::vector<std::string>& DatasetFormats() {
  static const auto* names = new std::vector<std::string>(common::NameVector(kDatasetFormats));
  return *names;
}

}  // namespace yoke::data
