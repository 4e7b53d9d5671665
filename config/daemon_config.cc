#include "config/daemon_config.h"

#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "common/status.h"
#include "config/config.h"
#include "config/yaml_limits.h"
#include "yaml-cpp/yaml.h"

namespace yoke::common {

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

}  // namespace yoke::common
