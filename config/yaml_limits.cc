#include "config/yaml_limits.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace yoke::common {

absl::Status CheckYamlLimits(absl::string_view text, const std::string& source) {
  if (text.size() > kMaxYamlBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", text.size(),
                                                   " bytes of YAML, over the limit of ",
                                                   kMaxYamlBytes, " (8 MiB)"));
  }
  std::vector<size_t> indents;  // open block levels, by indentation
  int flow = 0;                 // open [ and { brackets
  int line = 1;
  size_t i = 0;
  auto too_deep = [&](int depth) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": YAML nested ", depth,
                                                   " levels deep, over the limit of ",
                                                   kMaxYamlDepth));
  };
  while (i < text.size()) {
    // At the start of a line: its indentation and "- " items open block levels.
    size_t col = 0;
    while (i < text.size() && text[i] == ' ') ++i, ++col;
    const bool content = i < text.size() && text[i] != '\n' && text[i] != '#';
    if (content && flow == 0) {
      while (!indents.empty() && indents.back() >= col) indents.pop_back();
      indents.push_back(col);
      while (i + 1 < text.size() && text[i] == '-' && (text[i + 1] == ' ')) {
        i += 2, col += 2;
        while (i < text.size() && text[i] == ' ') ++i, ++col;
        indents.push_back(col);
      }
      if (static_cast<int>(indents.size()) > kMaxYamlDepth) {
        return too_deep(static_cast<int>(indents.size()));
      }
    }
    // The rest of the line: flow brackets outside quotes and comments.
    char quote = 0;
    for (; i < text.size() && text[i] != '\n'; ++i) {
      const char c = text[i];
      if (quote != 0) {
        if (c == '\\' && quote == '"') {
          ++i;
        } else if (c == quote) {
          quote = 0;
        }
        continue;
      }
      if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t')) {
        while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      } else if (c == '[' || c == '{') {
        ++flow;
        const int depth = static_cast<int>(indents.size()) + flow;
        if (depth > kMaxYamlDepth) return too_deep(depth);
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      }
    }
    ++i;  // the newline
    ++line;
  }
  return absl::OkStatus();
}

}  // namespace yoke::common
