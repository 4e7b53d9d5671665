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

// Whether a C1 control (0xc2 then 0x80-0x9f) starts at byte i of `s`.
inline bool IsC1At(absl::string_view s, size_t i) {
  return static_cast<unsigned char>(s[i]) == 0xc2 && i + 1 < s.size() &&
         (static_cast<unsigned char>(s[i + 1]) & 0xe0) == 0x80;
}

// Whether `s` holds a control character: a C0 byte (0x00-0x1f), DEL (0x7f)
// or a C1 control (U+0080-U+009F, 0xc2 0x80-0x9f in UTF-8). A terminal acts
// on them (ESC sequences retitle the window or clear the screen, a NUL ends
// the output), so names refuse them and the CLI escapes them when printing.
inline bool HasControlChar(absl::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || IsC1At(s, i)) return true;
  }
  return false;
}

// `s` with every control character (as HasControlChar counts them) but the
// bytes in `keep` written as a C escape (\n, \x1b, \xc2\x9b), and everything
// else, UTF-8 included, unchanged: user-supplied text as the CLI prints it
// (a table keeps its line ends: keep "\n").
inline std::string EscapeControl(absl::string_view s, absl::string_view keep = "") {
  if (!HasControlChar(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 || c == 0x7f) && keep.find(s[i]) == absl::string_view::npos) {
      absl::StrAppend(&out, absl::CHexEscape(s.substr(i, 1)));
    } else if (IsC1At(s, i)) {
      absl::StrAppend(&out, absl::CHexEscape(s.substr(i, 2)));
      ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace yoke::common

#endif  // YOKE_COMMON_QUOTE_H_
