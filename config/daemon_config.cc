#include "config/daemon_config.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "common/status.h"
#include "config/config.h"
#include "config/yaml_limits.h"
#include "yaml-cpp/yaml.h"

namespace yoke::common {

using google::protobuf::FieldDescriptor;

absl::Status LoadDaemonConfig(const std::string& path, google::protobuf::Message* cfg) {
  ASSIGN_OR_RETURN(std::string text, ReadRegularFile(path, kMaxYamlBytes, "config file"));
  RETURN_IF_ERROR(CheckYamlLimits(text, path));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
  }
  return Annotate(YamlToProto(root, cfg, ""), path);
}

std::string GetEnv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

ConfigFlags::ConfigFlags(FlagParser* parser, const google::protobuf::Descriptor* config)
    : parser_(parser), config_(config) {}

ConfigFlags::Binding& ConfigFlags::Bind(absl::string_view field, Kind kind) {
  const FieldDescriptor* f = config_->FindFieldByName(std::string(field));
  FieldDescriptor::CppType want = FieldDescriptor::CPPTYPE_STRING;
  if (kind == Kind::kSwitch) want = FieldDescriptor::CPPTYPE_BOOL;
  if (kind == Kind::kInt) want = FieldDescriptor::CPPTYPE_INT32;
  if (kind == Kind::kMilliseconds || kind == Kind::kBytes) want = FieldDescriptor::CPPTYPE_INT64;
  if (f == nullptr || f->cpp_type() != want || f->is_repeated() != (kind == Kind::kStrings)) {
    std::fprintf(stderr, "ConfigFlags: %s has no field '%s' of the flag's type\n",
                 config_->full_name().c_str(), std::string(field).c_str());
    std::abort();
  }
  Binding& b = bindings_.emplace_back();
  b.field = f;
  b.kind = kind;
  return b;
}

ConfigFlags& ConfigFlags::String(absl::string_view names, absl::string_view field) {
  parser_->String(names, &Bind(field, Kind::kString).text);
  return *this;
}

ConfigFlags& ConfigFlags::Strings(absl::string_view names, absl::string_view field) {
  parser_->Strings(names, &Bind(field, Kind::kStrings).texts);
  return *this;
}

ConfigFlags& ConfigFlags::Switch(absl::string_view names, absl::string_view field) {
  parser_->Bool(names, &Bind(field, Kind::kSwitch).on);
  return *this;
}

ConfigFlags& ConfigFlags::Int(absl::string_view names, absl::string_view field, int min, int max) {
  Binding& b = Bind(field, Kind::kInt);
  parser_->Int(names, &b.number, min, max).Track(&b.occurred);
  return *this;
}

ConfigFlags& ConfigFlags::Milliseconds(absl::string_view names, absl::string_view field,
                                       absl::Duration min, absl::string_view what) {
  Binding& b = Bind(field, Kind::kMilliseconds);
  parser_->Duration(names, &b.duration, min, what).Track(&b.occurred);
  return *this;
}

ConfigFlags& ConfigFlags::Bytes(absl::string_view names, absl::string_view field, int64_t min,
                                absl::string_view what) {
  Binding& b = Bind(field, Kind::kBytes);
  parser_->Bytes(names, &b.bytes, min, what).Track(&b.occurred);
  return *this;
}

bool ConfigFlags::IsGiven(const Binding& b) {
  switch (b.kind) {
    case Kind::kString:
      return !b.text.empty();
    case Kind::kStrings:
      return !b.texts.empty();
    case Kind::kSwitch:
      return b.on;
    case Kind::kInt:
    case Kind::kMilliseconds:
    case Kind::kBytes:
      return b.occurred;
  }
  return false;
}

bool ConfigFlags::Given(absl::string_view field) const {
  for (const Binding& b : bindings_) {
    if (b.field->name() == field && IsGiven(b)) return true;
  }
  return false;
}

void ConfigFlags::Overlay(google::protobuf::Message* cfg) const {
  if (cfg->GetDescriptor() != config_) {
    std::fprintf(stderr, "ConfigFlags: Overlay on a %s, flags for a %s\n",
                 cfg->GetDescriptor()->full_name().c_str(), config_->full_name().c_str());
    std::abort();
  }
  const google::protobuf::Reflection* r = cfg->GetReflection();
  for (const Binding& b : bindings_) {
    if (!IsGiven(b)) continue;
    switch (b.kind) {
      case Kind::kString:
        r->SetString(cfg, b.field, b.text);
        break;
      case Kind::kStrings:
        r->ClearField(cfg, b.field);
        for (const std::string& t : b.texts) r->AddString(cfg, b.field, t);
        break;
      case Kind::kSwitch:
        r->SetBool(cfg, b.field, true);
        break;
      case Kind::kInt:
        r->SetInt32(cfg, b.field, b.number);
        break;
      case Kind::kMilliseconds:
        r->SetInt64(cfg, b.field, absl::ToInt64Milliseconds(b.duration));
        break;
      case Kind::kBytes:
        r->SetInt64(cfg, b.field, b.bytes);
        break;
    }
  }
}

}  // namespace yoke::common
