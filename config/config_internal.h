// Internal to config/config*.cc: helpers that the YAML reader (config.cc) and
// the `--set` overrides (config_override.cc) share. Not for other callers.
#ifndef YOKE_CONFIG_CONFIG_INTERNAL_H_
#define YOKE_CONFIG_CONFIG_INTERNAL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace yoke::common::config_internal {

// True for digits with an optional leading sign (surrounding spaces ignored).
bool LooksLikeInteger(absl::string_view s);

// The path of a `path=value` override, trimmed.
std::string OverridePath(const std::string& text);

// True when one path equals the other or contains it (`a.b` vs `a.b[0].c`).
bool PathsRelated(const std::string& a, const std::string& b);

}  // namespace yoke::common::config_internal

#endif  // YOKE_CONFIG_CONFIG_INTERNAL_H_
