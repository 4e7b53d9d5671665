// Proto -> YAML: the block YAML that YamlToProto reads back to an equal
// message (config.h: ProtoToYaml, JobSpecToYaml).
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "config/config.h"

namespace yoke::common {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  static const std::set<std::string> kReserved = {"null", "Null", "NULL",  "~",     "true",
                                                  "True", "TRUE", "false", "False", "FALSE"};
  if (kReserved.count(s)) return true;
  if (!(absl::ascii_isalnum(static_cast<unsigned char>(s[0])) || s[0] == '/' || s[0] == '_')) {
    return true;
  }
  for (char c : s) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' ||
          c == '-')) {
      return true;
    }
  }
  return false;
}

// The shortest decimal text that parses back to exactly `x`.
template <typename T>
std::string FloatText(T x) {
  if (std::isnan(x)) return ".nan";
  if (std::isinf(x)) return x > 0 ? ".inf" : "-.inf";
  const int max_digits = std::numeric_limits<T>::max_digits10;
  std::string s;
  for (int p = 6; p <= max_digits; ++p) {
    s = absl::StrFormat("%.*g", p, static_cast<double>(x));
    T back = static_cast<T>(std::strtod(s.c_str(), nullptr));
    if (back == x) break;
  }
  return s;
}

void EmitScalar(YAML::Emitter& out, const Message& msg, const FieldDescriptor* f, int index) {
  const Reflection* r = msg.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      out << absl::StrCat(rep ? r->GetRepeatedInt32(msg, f, index) : r->GetInt32(msg, f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      out << absl::StrCat(rep ? r->GetRepeatedInt64(msg, f, index) : r->GetInt64(msg, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      out << absl::StrCat(rep ? r->GetRepeatedUInt32(msg, f, index) : r->GetUInt32(msg, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      out << absl::StrCat(rep ? r->GetRepeatedUInt64(msg, f, index) : r->GetUInt64(msg, f));
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      out << FloatText(rep ? r->GetRepeatedFloat(msg, f, index) : r->GetFloat(msg, f));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      out << FloatText(rep ? r->GetRepeatedDouble(msg, f, index) : r->GetDouble(msg, f));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      out << ((rep ? r->GetRepeatedBool(msg, f, index) : r->GetBool(msg, f)) ? "true" : "false");
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      out << (rep ? r->GetRepeatedEnum(msg, f, index) : r->GetEnum(msg, f))->name();
      break;
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = rep ? r->GetRepeatedString(msg, f, index) : r->GetString(msg, f);
      if (NeedsQuotes(s)) out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
}

void EmitMessage(YAML::Emitter& out, const Message& msg);

void EmitValue(YAML::Emitter& out, const Message& msg, const FieldDescriptor* f, int index) {
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    const Reflection* r = msg.GetReflection();
    EmitMessage(out, index >= 0 ? r->GetRepeatedMessage(msg, f, index) : r->GetMessage(msg, f));
  } else {
    EmitScalar(out, msg, f, index);
  }
}

void EmitMessage(YAML::Emitter& out, const Message& msg) {
  const Reflection* r = msg.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(msg, &fields);
  if (fields.empty()) {
    out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
    return;
  }
  out << YAML::BeginMap;
  for (const FieldDescriptor* f : fields) {
    out << YAML::Key << f->name() << YAML::Value;
    if (f->is_map()) {
      out << YAML::BeginMap;
      const Descriptor* entry = f->message_type();
      for (int i = 0; i < r->FieldSize(msg, f); ++i) {
        const Message& e = r->GetRepeatedMessage(msg, f, i);
        out << YAML::Key;
        EmitScalar(out, e, entry->map_key(), -1);
        out << YAML::Value;
        EmitValue(out, e, entry->map_value(), -1);
      }
      out << YAML::EndMap;
    } else if (f->is_repeated()) {
      // Numbers read best inline ([28, 28, 1]); strings (paths) one per line.
      const bool inline_list = f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE &&
                               f->cpp_type() != FieldDescriptor::CPPTYPE_STRING;
      if (inline_list) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (int i = 0; i < r->FieldSize(msg, f); ++i) EmitValue(out, msg, f, i);
      out << YAML::EndSeq;
    } else {
      EmitValue(out, msg, f, -1);
    }
  }
  out << YAML::EndMap;
}
}  // namespace

std::string ProtoToYaml(const Message& msg) {
  YAML::Emitter out;
  out.SetIndent(2);
  EmitMessage(out, msg);
  std::string s = out.c_str();
  if (!s.empty() && s.back() != '\n') s.push_back('\n');
  return s;
}

std::string JobSpecToYaml(const v1::JobSpec& spec) { return ProtoToYaml(spec); }

}  // namespace yoke::common
