// Fixed lists of names that a factory dispatches on (zoo models, optimizers,
// dataset formats, ...). The list is a constexpr array of string_views in a
// names-only library, so job validation can read it without linking the
// factory; the factory keeps a table of {name, builder} entries and checks it
// against the list at compile time:
//
//   constexpr Entry kBuilders[] = {{"mlp", Mlp}, {"cnn", Cnn}};
//   static_assert(common::NamesMatch(kBuilders, kZooModels), "...");
//
// Thread-safety: constexpr data and pure functions.
#ifndef YOKE_COMMON_NAME_LIST_H_
#define YOKE_COMMON_NAME_LIST_H_

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace yoke::common {

// True when the `name` members of `table` are `names`, in the same order.
template <typename Entry, size_t M, size_t N>
constexpr bool NamesMatch(const Entry (&table)[M], const std::string_view (&names)[N]) {
  if (M != N) return false;
  for (size_t i = 0; i < N; ++i) {
    if (table[i].name != names[i]) return false;
  }
  return true;
}

// `names` as strings, in order (for messages and validation).
template <size_t N>
std::vector<std::string> NameVector(const std::string_view (&names)[N]) {
  return std::vector<std::string>(std::begin(names), std::end(names));
}

}  // namespace yoke::common

#endif  // YOKE_COMMON_NAME_LIST_H_
