// `--set path=value` overrides, applied to the YAML document before it is
// converted (config.h: ApplyOverride). `path=null` leaves a tagged null that
// the converter turns into a cleared field (config_internal.h: kClearTag).
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "config/config.h"
#include "config/config_internal.h"

namespace yoke::common {
namespace {

using config_internal::LooksLikeInteger;

struct PathStep {
  bool is_index = false;
  std::string key;
  size_t index = 0;
};

// Parses `a.b[2].c` into steps; false on malformed syntax.
bool ParseOverridePath(const std::string& path, std::vector<PathStep>* steps) {
  size_t i = 0;
  const size_t n = path.size();
  auto ident_char = [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  };
  while (i < n) {
    size_t start = i;
    while (i < n && ident_char(path[i])) ++i;
    if (i == start) return false;
    steps->push_back({false, path.substr(start, i - start), 0});
    while (i < n && path[i] == '[') {
      size_t close = path.find(']', i);
      if (close == std::string::npos) return false;
      std::string digits = path.substr(i + 1, close - i - 1);
      uint64_t idx;
      if (!LooksLikeInteger(digits) || digits[0] == '-' || digits[0] == '+' ||
          !absl::SimpleAtoi(digits, &idx)) {
        return false;
      }
      steps->push_back({true, "", static_cast<size_t>(idx)});
      i = close + 1;
    }
    if (i == n) break;
    if (path[i] != '.') return false;
    ++i;
    if (i == n) return false;
  }
  return !steps->empty();
}

std::string StepsToPath(const std::vector<PathStep>& steps, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    if (steps[i].is_index) {
      absl::StrAppend(&out, "[", steps[i].index, "]");
    } else {
      absl::StrAppend(&out, out.empty() ? "" : ".", steps[i].key);
    }
  }
  return out;
}

const char* KindName(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "a scalar";
    default:
      return "null";
  }
}

absl::Status ApplyOverrideImpl(const std::string& text, YAML::Node* root) {
  auto bad = [&text](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", text, ": ", why));
  };
  size_t eq = text.find('=');
  if (eq == std::string::npos) return bad("expected path=value, e.g. training.epochs=1");
  const std::string path(absl::StripAsciiWhitespace(text.substr(0, eq)));
  const std::string value_text = text.substr(eq + 1);
  std::vector<PathStep> steps;
  if (!ParseOverridePath(path, &steps) || steps[0].is_index) {
    return bad(absl::StrCat("malformed path '", path,
                            "' (expected field names and list indices, e.g. "
                            "model.layers[0].dense.units)"));
  }
  YAML::Node value;
  if (value_text.empty()) {
    value = YAML::Node(std::string());
  } else {
    try {
      value = YAML::Load(value_text);
    } catch (const YAML::Exception& e) {
      return bad(absl::StrCat("the value is not valid YAML: ", e.msg));
    }
  }
  // `field=null` (or ~) clears the field; a null list item stays a null.
  const bool clear = value.IsNull() && !value_text.empty() && !steps.back().is_index;
  if (clear) {
    value = YAML::Node(YAML::NodeType::Null);
    value.SetTag(config_internal::kClearTag);
  }

  if (!root->IsDefined() || root->IsNull()) *root = YAML::Node(YAML::NodeType::Map);
  // Node copies alias the same tree node; reset() moves the handle without
  // touching the tree, whereas operator= would overwrite the node it points at.
  YAML::Node cur;
  cur.reset(*root);
  for (size_t i = 0; i < steps.size(); ++i) {
    const PathStep& st = steps[i];
    const std::string where = StepsToPath(steps, i);
    YAML::Node next;
    if (st.is_index) {
      if (!cur.IsSequence()) {
        return bad(absl::StrCat("'", where, "' is ", KindName(cur), ", not a list"));
      }
      if (st.index >= cur.size()) {
        return bad(absl::StrCat("index ", st.index, " is past the end of '", where, "' (",
                                cur.size(), cur.size() == 1 ? " item)" : " items)"));
      }
      next.reset(cur[st.index]);
    } else {
      if (!cur.IsDefined() || cur.IsNull()) {
        // A map made only to clear a field in it is marked so (kClearTag);
        // an override that sets a value in it makes it a real one.
        const bool absent = !cur.IsDefined() || config_internal::IsClear(cur);
        cur = YAML::Node(YAML::NodeType::Map);
        if (clear && absent) cur.SetTag(config_internal::kClearTag);
      } else if (!clear && config_internal::IsClear(cur)) {
        cur.SetTag("");
      }
      if (!cur.IsMap()) {
        return bad(absl::StrCat("'", where, "' is ", KindName(cur), ", cannot set a field '",
                                st.key, "' in it"));
      }
      next.reset(cur[st.key]);
    }
    cur.reset(next);
  }
  cur = value;
  return absl::OkStatus();
}

}  // namespace

namespace config_internal {

std::string OverridePath(const std::string& text) {
  size_t eq = text.find('=');
  return std::string(absl::StripAsciiWhitespace(text.substr(0, eq)));
}

// True when one path equals the other or contains it (`a.b` vs `a.b[0].c`).
bool PathsRelated(const std::string& a, const std::string& b) {
  const std::string& shorter = a.size() <= b.size() ? a : b;
  const std::string& longer = a.size() <= b.size() ? b : a;
  if (!absl::StartsWith(longer, shorter)) return false;
  if (longer.size() == shorter.size()) return true;
  char c = longer[shorter.size()];
  return c == '.' || c == '[';
}

bool IsClear(const YAML::Node& node) {
  return node.IsDefined() && node.Tag() == kClearTag && node.Mark().is_null();
}

}  // namespace config_internal

absl::Status ApplyOverride(const std::string& override_text, YAML::Node* root) {
  try {
    return ApplyOverrideImpl(override_text, root);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("--set ", override_text, ": ", e.msg));
  }
}

}  // namespace yoke::common
