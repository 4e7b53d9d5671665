// Internal to config/config*.cc: helpers that the YAML reader (config.cc) and
// the `--set` overrides (config_override.cc) share. Not for other callers.
#ifndef YOKE_CONFIG_CONFIG_INTERNAL_H_
#define YOKE_CONFIG_CONFIG_INTERNAL_H_

#include <string>

#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace yoke::common::config_internal {

// True for digits with an optional leading sign (surrounding spaces ignored).
bool LooksLikeInteger(absl::string_view s);

// The path of a `path=value` override, trimmed.
std::string OverridePath(const std::string& text);

// True when one path equals the other or contains it (`a.b` vs `a.b[0].c`).
bool PathsRelated(const std::string& a, const std::string& b);

// `--set path=null` (ApplyOverride) puts a null carrying this tag at `path`,
// and the same tag on every map it had to create to get there. The converter
// (config.cc) clears a field whose value is such a null, and sets nothing
// from such a map: it only checks the field names in it (against the field's
// message if that is set, a scratch copy otherwise), so clearing inside an
// absent message does not create it.
inline constexpr char kClearTag[] = "!yoke-clear";

// True for a node ApplyOverride tagged kClearTag. Only nodes that code made
// count: they have no position in any text, so a file that spells the tag
// clears nothing.
bool IsClear(const YAML::Node& node);

}  // namespace yoke::common::config_internal

#endif  // YOKE_CONFIG_CONFIG_INTERNAL_H_
