#include "common/flags.h"

#include <utility>

#include "absl/flags/marshalling.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace yoke::common {

FlagParser::FlagParser(std::string program, std::string usage)
    : program_(std::move(program)), usage_(std::move(usage)) {}

FlagParser& FlagParser::Add(absl::string_view names, bool takes_value, Setter set) {
  Flag f;
  for (absl::string_view n : absl::StrSplit(names, ',', absl::SkipEmpty())) {
    f.names.emplace_back(n);
  }
  f.takes_value = takes_value;
  f.set = std::move(set);
  flags_.push_back(std::move(f));
  return *this;
}

FlagParser& FlagParser::String(absl::string_view names, std::string* dst) {
  return Add(names, true, [dst](const std::string& v) {
    *dst = v;
    return absl::OkStatus();
  });
}

FlagParser& FlagParser::Strings(absl::string_view names, std::vector<std::string>* dst) {
  return Add(names, true, [dst](const std::string& v) {
    dst->push_back(v);
    return absl::OkStatus();
  });
}

FlagParser& FlagParser::Bool(absl::string_view names, bool* dst) {
  std::string name(names.substr(0, names.find(',')));
  return Add(names, false, [dst, name](const std::string& v) {
    std::string error;
    if (!absl::ParseFlag(v, dst, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": expected true or false, got '", v, "'"));
    }
    return absl::OkStatus();
  });
}

FlagParser& FlagParser::Int(absl::string_view names, int* dst, int min, int max) {
  std::string name(names.substr(0, names.find(',')));
  std::string expected = "an integer";
  if (min != INT_MIN && max != INT_MAX) {
    absl::StrAppend(&expected, " in [", min, ", ", max, "]");
  } else if (min != INT_MIN) {
    absl::StrAppend(&expected, " >= ", min);
  } else if (max != INT_MAX) {
    absl::StrAppend(&expected, " <= ", max);
  }
  return Add(names, true, [=](const std::string& v) {
    int parsed = 0;
    std::string error;
    if (!absl::ParseFlag(v, &parsed, &error) || parsed < min || parsed > max) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": expected ", expected, ", got '", v, "'"));
    }
    *dst = parsed;
    return absl::OkStatus();
  });
}

FlagParser& FlagParser::Duration(absl::string_view names, absl::Duration* dst, absl::Duration min,
                                 absl::string_view what) {
  std::string name(names.substr(0, names.find(',')));
  return Add(names, true, [=, what = std::string(what)](const std::string& v) {
    absl::Duration parsed;
    if (!ParseDurationFlag(v, &parsed) || parsed < min) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": expected ", what, ", got '", v, "'"));
    }
    *dst = parsed;
    return absl::OkStatus();
  });
}

FlagParser& FlagParser::Bytes(absl::string_view names, int64_t* dst, int64_t min,
                              absl::string_view what) {
  std::string name(names.substr(0, names.find(',')));
  return Add(names, true, [dst, min, name, what = std::string(what)](const std::string& v) {
    int64_t bytes = 0;
    if (!ParseByteSizeFlag(v, &bytes) || bytes < min) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": expected ", what, ", got '", v, "'"));
    }
    *dst = bytes;
    return absl::OkStatus();
  });
}

FlagParser& FlagParser::Custom(absl::string_view names, Setter set) {
  return Add(names, true, std::move(set));
}

FlagParser& FlagParser::Track(bool* given) {
  Setter set = std::move(flags_.back().set);
  flags_.back().set = [set = std::move(set), given](const std::string& v) {
    absl::Status s = set(v);
    if (s.ok()) *given = true;
    return s;
  };
  return *this;
}

const FlagParser::Flag* FlagParser::Find(absl::string_view name) const {
  // The last declaration of a name wins.
  for (auto f = flags_.rbegin(); f != flags_.rend(); ++f) {
    for (const auto& n : f->names) {
      if (n == name) return &*f;
    }
  }
  return nullptr;
}

absl::StatusOr<ParsedArgs> FlagParser::Parse(const std::vector<std::string>& args) const {
  ParsedArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      parsed.positional.insert(parsed.positional.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      parsed.positional.push_back(a);
      continue;
    }
    std::string name = a;
    std::optional<std::string> value;
    if (a.compare(0, 2, "--") == 0) {
      if (size_t eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
      }
    }
    if (name == "--help" || name == "-h") {
      parsed.help = true;
      return parsed;
    }
    const Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", name, "'"));
    }
    if (!flag->takes_value) {
      if (absl::Status s = flag->set(value.value_or("true")); !s.ok()) return s;
      continue;
    }
    if (!value.has_value()) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      }
      value = args[++i];
    }
    if (absl::Status s = flag->set(*value); !s.ok()) return s;
  }
  return parsed;
}

std::optional<int> FlagParser::ParseOrExitCode(const std::vector<std::string>& args,
                                               std::vector<std::string>* positional, FILE* out,
                                               FILE* err) const {
  absl::StatusOr<ParsedArgs> parsed = Parse(args);
  if (!parsed.ok()) return UsageError(err, parsed.status().message());
  if (parsed->help) {
    std::fputs(usage_.c_str(), out);
    return 0;
  }
  if (positional != nullptr) *positional = std::move(parsed->positional);
  return std::nullopt;
}

int FlagParser::UsageError(FILE* err, absl::string_view message) const {
  std::fprintf(err, "%s: %s\n%s", program_.c_str(), std::string(message).c_str(), usage_.c_str());
  return 2;
}

std::vector<std::string> ArgsOf(int argc, char** argv) {
  return argc > 1 ? std::vector<std::string>(argv + 1, argv + argc) : std::vector<std::string>();
}

bool ParseDurationFlag(absl::string_view text, absl::Duration* out) {
  int64_t ms;
  if (absl::SimpleAtoi(text, &ms)) {
    *out = absl::Milliseconds(ms);
  } else if (!absl::ParseDuration(text, out)) {
    return false;
  }
  return *out >= absl::ZeroDuration();
}

bool ParseByteSizeFlag(absl::string_view text, int64_t* out) {
  text = absl::StripAsciiWhitespace(text);
  size_t unit_at = 0;
  while (unit_at < text.size() && (absl::ascii_isdigit(text[unit_at]) || text[unit_at] == '.')) {
    ++unit_at;
  }
  const absl::string_view number = text.substr(0, unit_at);
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text.substr(unit_at)));
  if (number.empty() || number.front() == '.' || number.back() == '.') return false;
  // "" or "b" is bytes; a prefix k, m, g or t is a power of 1024 alone or
  // with "ib", and of 1000 with "b".
  double scale = 1;
  if (!unit.empty() && unit != "b") {
    const size_t power = absl::string_view("kmgt").find(unit[0]);
    const absl::string_view suffix = absl::string_view(unit).substr(1);
    if (power == absl::string_view::npos) return false;
    const double base = suffix.empty() || suffix == "ib" ? 1024.0 : suffix == "b" ? 1e3 : 0;
    if (base == 0) return false;
    for (size_t i = 0; i <= power; ++i) scale *= base;
  }
  if (number.find('.') == absl::string_view::npos) {
    // Whole numbers exactly, with no rounding through a double.
    uint64_t n = 0;
    if (!absl::SimpleAtoi(number, &n)) return false;
    const auto s = static_cast<uint64_t>(scale);
    if (n > static_cast<uint64_t>(INT64_MAX) / s) return false;
    *out = static_cast<int64_t>(n * s);
    return true;
  }
  double value = 0;
  if (!absl::SimpleAtod(number, &value)) return false;
  const double bytes = value * scale;
  // 2^63 is the first double past INT64_MAX; a byte count is whole.
  if (!(bytes < 9223372036854775808.0) || bytes != static_cast<double>(static_cast<int64_t>(bytes)))
    return false;
  *out = static_cast<int64_t>(bytes);
  return true;
}

}  // namespace yoke::common
