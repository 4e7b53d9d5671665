// CheckYamlLimits: what a YAML text must satisfy before yaml-cpp sees it.
//
// yaml-cpp builds the whole tree in memory (a 50 MB one-line flow map took
// 8.2 GB) and recurses once per nesting level, so a hostile file could
// exhaust memory or the stack. Job files and daemon configs are small and
// shallow, so anything over kMaxYamlBytes or nested deeper than
// kMaxYamlDepth is refused with INVALID_ARGUMENT before parsing.
//
// Depth is measured without parsing, and errs towards counting more: every
// open flow bracket ([ or {) outside quotes and comments is a level, and so
// is every block indentation step and every "- " that opens a sequence item.
//
// Thread-safety: a pure function.
#ifndef YOKE_CONFIG_YAML_LIMITS_H_
#define YOKE_CONFIG_YAML_LIMITS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace yoke::common {

inline constexpr size_t kMaxYamlBytes = 8 << 20;
inline constexpr int kMaxYamlDepth = 64;

// `source` names the text in messages (a path, "--set x=...").
absl::Status CheckYamlLimits(absl::string_view text, const std::string& source);

}  // namespace yoke::common

#endif  // YOKE_CONFIG_YAML_LIMITS_H_
