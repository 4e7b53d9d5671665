// Quote: how error messages show input they did not accept.
//
// A hostile or careless client can send a 4 MB job name or a binary blob as a
// layer type; echoing it whole into an error (and from there into logs, the
// store and every `yoke jobs`) would amplify it. Quote shows at most
// kMaxQuotedBytes bytes of the input, escapes control and non-ASCII bytes so
// a message stays one printable line, and says how much it left out.
#ifndef YOKE_COMMON_QUOTE_H_
#define YOKE_COMMON_QUOTE_H_

#include <cstddef>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace yoke::common {

inline constexpr size_t kMaxQuotedBytes = 200;

// 'text', or 'first 200 bytes…' (+N bytes) when longer. Bytes outside
// printable ASCII appear as C escapes (\n, \x01); a cut never splits one.
inline std::string Quote(absl::string_view s, size_t max_bytes = kMaxQuotedBytes) {
  const absl::string_view shown = s.substr(0, max_bytes);
  std::string out = absl::StrCat("'", absl::CHexEscape(shown), "'");
  if (s.size() > shown.size()) absl::StrAppend(&out, "... (+", s.size() - shown.size(), " bytes)");
  return out;
}

// `s` cut to at most `max_bytes` bytes (for fields stored or shown, such as a
// failure reason), with a note of how much was dropped.
inline std::string Truncate(absl::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  return absl::StrCat(s.substr(0, max_bytes), "... (+", s.size() - max_bytes, " bytes)");
}

}  // namespace yoke::common

#endif  // YOKE_COMMON_QUOTE_H_
