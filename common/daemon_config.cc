#include "common/daemon_config.h"

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/status.h"
#include "yaml-cpp/yaml.h"

namespace yoke::common {

absl::Status LoadDaemonConfig(const std::string& path, google::protobuf::Message* cfg) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open config file"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1,
                                                   ": YAML syntax error: ", e.msg));
  }
  return Annotate(YamlToProto(root, cfg, ""), path);
}

}  // namespace yoke::common
