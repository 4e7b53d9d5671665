// YAML -> proto: the descriptor-walking converter and the job file loaders.
// `--set` overrides are in config_override.cc, proto -> YAML in
// config_emit.cc, validation in job_validate.cc.
#include "config/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/quote.h"
#include "common/read_file.h"
#include "common/status.h"
#include "config/config_internal.h"
#include "config/yaml_limits.h"
#include "yaml-cpp/eventhandler.h"

namespace yoke::common {
namespace config_internal {

bool LooksLikeInteger(absl::string_view s) {
  s = absl::StripAsciiWhitespace(s);
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

}  // namespace config_internal

namespace {

using config_internal::LooksLikeInteger;
using config_internal::OverridePath;
using config_internal::PathsRelated;

using google::protobuf::Descriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::OneofDescriptor;
using google::protobuf::Reflection;

std::string Join(const std::string& path, const std::string& name) {
  return path.empty() ? name : absl::StrCat(path, ".", name);
}

// Levenshtein distance; names are short, so the O(n*m) table is fine.
int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// " (did you mean 'x'?)" for the closest candidate within distance 2, else "".
std::string Suggest(const std::string& got, const std::vector<std::string>& known) {
  int best = 3;
  std::string best_name;
  for (const std::string& k : known) {
    int d = EditDistance(absl::AsciiStrToLower(got), k);
    if (d < best) {
      best = d;
      best_name = k;
    }
  }
  if (best_name.empty()) return "";
  return absl::StrCat("did you mean '", best_name, "'?");
}

std::string WithSpace(const std::string& s) { return s.empty() ? s : s + " "; }
std::string Parenthesised(const std::string& s) { return s.empty() ? s : " (" + s + ")"; }

// A quoted scalar carries the non-specific tag "!"; a plain one carries "?".
bool IsQuoted(const YAML::Node& n) { return n.Tag() == "!"; }

// How a node reads in an error message: got 'sixty-four', got a list, ...
std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Null:
      return "nothing (null)";
    case YAML::NodeType::Scalar:
      if (IsQuoted(n)) return absl::StrCat("the quoted string \"", Truncate(n.Scalar(), 200), "\"");
      return Quote(n.Scalar());
    default:
      return "an undefined value";
  }
}

// Walks a YAML tree against a message descriptor. On failure it remembers the
// failing node's position and field path so the file loaders can point at it.
class Converter {
 public:
  absl::Status ConvertMessage(const YAML::Node& node, google::protobuf::Message* msg,
                              const std::string& path) {
    const Descriptor* d = msg->GetDescriptor();
    if (node.IsNull()) return absl::OkStatus();
    if (node.IsScalar()) return OneofShorthand(node, msg, path);
    if (!node.IsMap()) {
      return Fail(node, path,
                  absl::StrCat("expected a map of ", d->name(), " fields, got ", Describe(node)));
    }
    std::set<std::string> seen;
    std::map<const OneofDescriptor*, const FieldDescriptor*> oneof_set;
    for (auto it = node.begin(); it != node.end(); ++it) {
      // A copy: `it->` returns a temporary proxy, so a reference would dangle
      // (ASan, stack-use-after-scope; found by tests/fuzz/job_spec_yaml_fuzz).
      const YAML::Node key = it->first;
      if (!key.IsScalar()) {
        return Fail(key, path, absl::StrCat("keys must be field names, got ", Describe(key)));
      }
      const std::string name = key.Scalar();
      const std::string fpath = Join(path, name);
      if (!seen.insert(name).second) {
        return Fail(key, fpath, "duplicate key (each field may appear once)");
      }
      const FieldDescriptor* f = d->FindFieldByName(name);
      if (f == nullptr) {
        std::vector<std::string> known;
        for (int i = 0; i < d->field_count(); ++i) known.push_back(d->field(i)->name());
        return Fail(key, fpath,
                    absl::StrCat("unknown field (", WithSpace(Suggest(name, known)),
                                 "known: ", absl::StrJoin(known, ", "), ")"));
      }
      if (config_internal::IsClear(it->second)) {  // `--set path=null`
        RETURN_IF_ERROR(Clear(it->second, msg, f, fpath));
        continue;
      }
      if (const OneofDescriptor* o = f->real_containing_oneof()) {
        auto [pos, inserted] = oneof_set.emplace(o, f);
        if (!inserted) return OneofConflict(key, path, o, pos->second, f);
      }
      RETURN_IF_ERROR(Field(it->second, msg, f, fpath));
    }
    return absl::OkStatus();
  }

  const YAML::Mark& error_mark() const { return mark_; }
  const std::string& error_path() const { return error_path_; }

 private:
  absl::Status Fail(const YAML::Node& at, const std::string& path, const std::string& what) {
    mark_ = at.Mark();
    error_path_ = path;
    return absl::InvalidArgumentError(absl::StrCat(path.empty() ? "document" : path, ": ", what));
  }

  static std::string OneofMembers(const OneofDescriptor* o) {
    std::vector<std::string> names;
    for (int i = 0; i < o->field_count(); ++i) names.push_back(o->field(i)->name());
    return absl::StrJoin(names, ", ");
  }

  absl::Status OneofConflict(const YAML::Node& at, const std::string& path,
                             const OneofDescriptor* o, const FieldDescriptor* a,
                             const FieldDescriptor* b) {
    return Fail(at, path,
                absl::StrCat("set only one of ", OneofMembers(o), " (got ", a->name(), " and ",
                             b->name(), ")"));
  }

  // A field `--set path=null` reaches (config_internal::kClearTag): a null
  // clears it; a map made to reach a field inside it sets nothing, and its
  // names are checked against the message if set, a scratch copy if not.
  absl::Status Clear(const YAML::Node& v, Message* msg, const FieldDescriptor* f,
                     const std::string& fpath) {
    const Reflection* r = msg->GetReflection();
    if (v.IsNull()) {
      r->ClearField(msg, f);
      return absl::OkStatus();
    }
    if (f->is_repeated() || f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return Field(v, msg, f, fpath);  // a map where none fits: the usual error
    }
    if (r->HasField(*msg, f)) return ConvertMessage(v, r->MutableMessage(msg, f), fpath);
    std::unique_ptr<Message> scratch(r->GetMessage(*msg, f).New());
    return ConvertMessage(v, scratch.get(), fpath);
  }

  // `- relu` for `- relu: {}`: a scalar naming a message-typed oneof member.
  absl::Status OneofShorthand(const YAML::Node& node, google::protobuf::Message* msg,
                              const std::string& path) {
    const Descriptor* d = msg->GetDescriptor();
    std::vector<std::string> members;
    for (int i = 0; i < d->oneof_decl_count(); ++i) {
      const OneofDescriptor* o = d->oneof_decl(i);
      if (o->is_synthetic()) continue;  // proto3 `optional`, not a real choice
      for (int j = 0; j < o->field_count(); ++j) {
        const FieldDescriptor* f = o->field(j);
        if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
        members.push_back(f->name());
        if (!IsQuoted(node) && f->name() == node.Scalar()) {
          msg->GetReflection()->MutableMessage(msg, f);
          return absl::OkStatus();
        }
      }
    }
    if (members.empty()) {
      return Fail(node, path,
                  absl::StrCat("expected a map of ", d->name(), " fields, got ", Describe(node)));
    }
    return Fail(node, path,
                absl::StrCat("expected a map or one of ", absl::StrJoin(members, ", "), ", got ",
                             Describe(node), Parenthesised(Suggest(node.Scalar(), members))));
  }

  absl::Status Field(const YAML::Node& v, google::protobuf::Message* msg, const FieldDescriptor* f,
                     const std::string& fpath) {
    const Reflection* r = msg->GetReflection();
    if (f->is_map()) return MapField(v, msg, f, fpath);
    if (f->is_repeated()) {
      if (!v.IsSequence()) {
        return Fail(v, fpath, absl::StrCat("expected a list, got ", Describe(v)));
      }
      // A YAML list replaces the field, so an override never appends by accident.
      r->ClearField(msg, f);
      for (size_t i = 0; i < v.size(); ++i) {
        const YAML::Node e = v[i];
        std::string epath = absl::StrCat(fpath, "[", i, "]");
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          RETURN_IF_ERROR(ConvertMessage(e, r->AddMessage(msg, f), epath));
        } else {
          RETURN_IF_ERROR(Scalar(e, msg, f, epath, /*add=*/true));
        }
      }
      return absl::OkStatus();
    }
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      return ConvertMessage(v, r->MutableMessage(msg, f), fpath);
    }
    return Scalar(v, msg, f, fpath, /*add=*/false);
  }

  absl::Status MapField(const YAML::Node& v, google::protobuf::Message* msg,
                        const FieldDescriptor* f, const std::string& fpath) {
    if (!v.IsMap()) return Fail(v, fpath, absl::StrCat("expected a map, got ", Describe(v)));
    const Reflection* r = msg->GetReflection();
    r->ClearField(msg, f);
    const FieldDescriptor* kf = f->message_type()->map_key();
    const FieldDescriptor* vf = f->message_type()->map_value();
    std::set<std::string> seen;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!it->first.IsScalar()) {
        return Fail(it->first, fpath,
                    absl::StrCat("map keys must be scalars, got ", Describe(it->first)));
      }
      std::string epath = Join(fpath, it->first.Scalar());
      if (!seen.insert(it->first.Scalar()).second) return Fail(it->first, epath, "duplicate key");
      google::protobuf::Message* entry = r->AddMessage(msg, f);
      RETURN_IF_ERROR(Scalar(it->first, entry, kf, epath, /*add=*/false));
      RETURN_IF_ERROR(Field(it->second, entry, vf, epath));
    }
    return absl::OkStatus();
  }

  // Parses a scalar node into field `f`; `add` appends to a repeated field.
  absl::Status Scalar(const YAML::Node& v, google::protobuf::Message* msg, const FieldDescriptor* f,
                      const std::string& path, bool add) {
    const Reflection* r = msg->GetReflection();
    const std::string& s = v.IsScalar() ? v.Scalar() : "";
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64: {
        const bool is32 = f->cpp_type() == FieldDescriptor::CPPTYPE_INT32;
        const char* what = "an integer";
        if (!v.IsScalar() || IsQuoted(v)) {
          return Fail(v, path, absl::StrCat("expected ", what, ", got ", Describe(v)));
        }
        int64_t x;
        if (!absl::SimpleAtoi(s, &x)) {
          if (LooksLikeInteger(s)) {
            return Fail(v, path, absl::StrCat(s, " is out of range for a 64-bit integer"));
          }
          return Fail(v, path, absl::StrCat("expected ", what, ", got ", Describe(v)));
        }
        if (is32) {
          if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
            return Fail(v, path,
                        absl::StrCat(s, " is out of range for a 32-bit integer (",
                                     std::numeric_limits<int32_t>::min(), "..",
                                     std::numeric_limits<int32_t>::max(), ")"));
          }
          add ? r->AddInt32(msg, f, static_cast<int32_t>(x))
              : r->SetInt32(msg, f, static_cast<int32_t>(x));
        } else {
          add ? r->AddInt64(msg, f, x) : r->SetInt64(msg, f, x);
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64: {
        const bool is32 = f->cpp_type() == FieldDescriptor::CPPTYPE_UINT32;
        if (!v.IsScalar() || IsQuoted(v)) {
          return Fail(v, path, absl::StrCat("expected a non-negative integer, got ", Describe(v)));
        }
        if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(s), "-")) {
          return Fail(v, path, absl::StrCat("must be >= 0 (unsigned), got ", s));
        }
        uint64_t x;
        if (!absl::SimpleAtoi(s, &x)) {
          if (LooksLikeInteger(s)) {
            return Fail(v, path, absl::StrCat(s, " is out of range for a 64-bit unsigned integer"));
          }
          return Fail(v, path, absl::StrCat("expected a non-negative integer, got ", Describe(v)));
        }
        if (is32) {
          if (x > std::numeric_limits<uint32_t>::max()) {
            return Fail(v, path, absl::StrCat(s, " is out of range for a 32-bit unsigned integer"));
          }
          add ? r->AddUInt32(msg, f, static_cast<uint32_t>(x))
              : r->SetUInt32(msg, f, static_cast<uint32_t>(x));
        } else {
          add ? r->AddUInt64(msg, f, x) : r->SetUInt64(msg, f, x);
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_FLOAT:
      case FieldDescriptor::CPPTYPE_DOUBLE: {
        if (!v.IsScalar() || IsQuoted(v)) {
          return Fail(v, path, absl::StrCat("expected a number, got ", Describe(v)));
        }
        double x;
        if (!ParseYamlFloat(s, &x)) {
          return Fail(v, path, absl::StrCat("expected a number, got ", Describe(v)));
        }
        if (f->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT) {
          if (std::isfinite(x) && std::fabs(x) > std::numeric_limits<float>::max()) {
            return Fail(v, path, absl::StrCat(s, " is out of range for a 32-bit float"));
          }
          add ? r->AddFloat(msg, f, static_cast<float>(x))
              : r->SetFloat(msg, f, static_cast<float>(x));
        } else {
          add ? r->AddDouble(msg, f, x) : r->SetDouble(msg, f, x);
        }
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_BOOL: {
        // Only the YAML 1.2 core spellings: `yes`, `on`, `1` are typos here.
        if (!v.IsScalar() || IsQuoted(v) || (s != "true" && s != "false")) {
          return Fail(v, path, absl::StrCat("expected true or false, got ", Describe(v)));
        }
        add ? r->AddBool(msg, f, s == "true") : r->SetBool(msg, f, s == "true");
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        if (!v.IsScalar()) {
          return Fail(v, path, absl::StrCat("expected a string, got ", Describe(v)));
        }
        add ? r->AddString(msg, f, s) : r->SetString(msg, f, s);
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_ENUM: {
        const EnumValueDescriptor* e = v.IsScalar() ? f->enum_type()->FindValueByName(s) : nullptr;
        if (e == nullptr) {
          std::vector<std::string> known;
          for (int i = 0; i < f->enum_type()->value_count(); ++i) {
            known.push_back(f->enum_type()->value(i)->name());
          }
          return Fail(
              v, path,
              absl::StrCat("expected one of ", absl::StrJoin(known, ", "), ", got ", Describe(v)));
        }
        add ? r->AddEnum(msg, f, e) : r->SetEnum(msg, f, e);
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        break;
    }
    return Fail(v, path, "internal: unexpected field type");
  }

  // YAML 1.2 floats, including .inf/-.inf/.nan; a number too large for a
  // double is rejected rather than turned into inf.
  static bool ParseYamlFloat(const std::string& text, double* out) {
    std::string s(absl::StripAsciiWhitespace(text));
    std::string lower = absl::AsciiStrToLower(s);
    if (lower == ".inf" || lower == "+.inf") {
      *out = std::numeric_limits<double>::infinity();
      return true;
    }
    if (lower == "-.inf") {
      *out = -std::numeric_limits<double>::infinity();
      return true;
    }
    if (lower == ".nan") {
      *out = std::numeric_limits<double>::quiet_NaN();
      return true;
    }
    if (s.empty()) return false;
    // Only decimal notation: no hex floats, no "inf"/"nan" spelled otherwise.
    for (char c : lower) {
      if (!(absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' ||
            c == '+' || c == '-')) {
        return false;
      }
    }
    char* end = nullptr;
    errno = 0;
    double x = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return false;
    if (errno == ERANGE && std::isinf(x)) return false;
    *out = x;
    return true;
  }

  YAML::Mark mark_ = YAML::Mark::null_mark();
  std::string error_path_;
};

// Records where each document starts; the events inside are ignored.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  std::vector<YAML::Mark> starts;
};

// Fails unless `text` holds at most one YAML document. Not YAML::LoadAll:
// yaml-cpp 0.7's parser can report empty documents forever without consuming
// input (a lone ',' does it), so LoadAll never returns. Here a document that
// starts where the one before it did is that stuck parser, reported as the
// syntax error it is.
absl::Status CheckSingleDocument(const std::string& text, const std::string& source_name) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts handler;
  // Every real document consumes input, so positions rise until the end;
  // the size bound is only a backstop.
  const std::vector<YAML::Mark>& starts = handler.starts;
  for (size_t docs = 0; docs <= text.size() + 1 && parser.HandleNextDocument(handler); ++docs) {
    size_t n = starts.size();
    if (n >= 2 && starts[n - 1].pos <= starts[n - 2].pos) break;
  }
  for (size_t i = 1; i < starts.size(); ++i) {
    const YAML::Mark& m = starts[i];
    if (m.pos > starts[i - 1].pos) continue;
    std::string at = m.pos >= 0 && static_cast<size_t>(m.pos) < text.size()
                         ? absl::StrCat(" at ", Quote(text.substr(m.pos, 1)))
                         : "";
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ":", m.line + 1, ":", m.column + 1,
                     ": YAML syntax error: ", "the parser cannot go on", at));
  }
  if (starts.size() < 2) return absl::OkStatus();
  const YAML::Mark& m = starts[1];
  return absl::InvalidArgumentError(
      absl::StrCat(source_name, ":", m.line + 1,
                   ": expected one YAML document, found a second one here "
                   "(remove '---')"));
}

}  // namespace

absl::Status YamlToProto(const YAML::Node& node, google::protobuf::Message* msg,
                         const std::string& path) {
  Converter c;
  try {
    return c.ConvertMessage(node, msg, path);
  } catch (const YAML::Exception& e) {
    // yaml-cpp reports some malformed trees only by throwing.
    return absl::InvalidArgumentError(absl::StrCat(path.empty() ? "document" : path, ": ", e.msg));
  }
}

absl::StatusOr<v1::JobSpec> LoadJobSpecString(const std::string& yaml_text,
                                              const std::vector<std::string>& overrides,
                                              const std::string& source_name) {
  RETURN_IF_ERROR(CheckYamlLimits(yaml_text, source_name));
  YAML::Node root;
  try {
    RETURN_IF_ERROR(CheckSingleDocument(yaml_text, source_name));
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) {
      return absl::InvalidArgumentError(absl::StrCat(source_name, ": YAML syntax error: ", e.msg));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        source_name, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  }
  for (const std::string& o : overrides) RETURN_IF_ERROR(ApplyOverride(o, &root));

  v1::JobSpec spec;
  Converter c;
  absl::Status s;
  try {
    s = c.ConvertMessage(root, &spec, "");
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": ", e.msg));
  }
  if (s.ok()) return spec;
  // An error inside a value an override set is the override's fault, and its
  // node carries no position in the file.
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    if (PathsRelated(OverridePath(*it), c.error_path())) {
      return absl::InvalidArgumentError(absl::StrCat("--set ", *it, ": ", s.message()));
    }
  }
  const YAML::Mark& m = c.error_mark();
  if (m.is_null()) return Annotate(s, source_name);
  return Annotate(s, absl::StrCat(source_name, ":", m.line + 1, ":", m.column + 1));
}

absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path,
                                            const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(std::string text, ReadRegularFile(path, kMaxYamlBytes, "job file"));
  return LoadJobSpecString(text, overrides, path);
}

}  // namespace yoke::common
