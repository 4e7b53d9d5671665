#include "client/cluster_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace yoke::client {

std::string DefaultClusterStatePath() {
  if (const char* d = std::getenv("YOKE_STATE_DIR"); d != nullptr && *d != '\0') {
    return absl::StrCat(d, "/cluster.json");
  }
  if (const char* d = std::getenv("XDG_RUNTIME_DIR"); d != nullptr && *d != '\0') {
    return absl::StrCat(d, "/yoke/cluster.json");
  }
  return absl::StrCat("/tmp/yoke-up-", ::getuid(), "/cluster.json");
}

absl::Status WriteClusterState(const ClusterState& state, const std::string& path) {
  google::protobuf::Struct s;
  auto& f = *s.mutable_fields();
  f["address"].set_string_value(state.address);
  f["dir"].set_string_value(state.dir);
  f["tls_dir"].set_string_value(state.tls_dir);
  f["coordinator_pid"].set_number_value(state.coordinator_pid);
  f["up_pid"].set_number_value(state.up_pid);
  auto* pids = f["worker_pids"].mutable_list_value();
  for (int pid : state.worker_pids) pids->add_values()->set_number_value(pid);
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  auto js = google::protobuf::util::MessageToJsonString(s, &json, opts);
  if (!js.ok()) return absl::InternalError(absl::StrCat("cluster state: ", js.ToString()));

  // The directory is private (0700) when this creates it; a failure shows
  // as the open below failing.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && std::filesystem::create_directories(dir, ec)) {
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  }
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  bool ok = ::write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size());
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(e)));
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterState> ReadClusterState(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no cluster state file at ", path));
  std::stringstream buf;
  buf << in.rdbuf();
  google::protobuf::Struct s;
  auto js = google::protobuf::util::JsonStringToMessage(buf.str(), &s);
  if (!js.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a cluster state file: ", js.ToString()));
  }
  const auto& f = s.fields();
  auto bad = [&](const char* field, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", field, ": expected ", want));
  };
  ClusterState st;
  auto it = f.find("address");
  if (it == f.end() || !it->second.has_string_value() || it->second.string_value().empty()) {
    return bad("address", "a non-empty host:port string");
  }
  st.address = it->second.string_value();
  if (it = f.find("dir"); it != f.end()) st.dir = it->second.string_value();
  if (it = f.find("tls_dir"); it != f.end()) st.tls_dir = it->second.string_value();
  it = f.find("coordinator_pid");
  if (it == f.end() || !it->second.has_number_value() || it->second.number_value() <= 0) {
    return bad("coordinator_pid", "a positive pid");
  }
  st.coordinator_pid = static_cast<int>(it->second.number_value());
  if (it = f.find("up_pid"); it != f.end() && it->second.has_number_value()) {
    st.up_pid = static_cast<int>(it->second.number_value());
  }
  if (it = f.find("worker_pids"); it != f.end()) {
    if (!it->second.has_list_value()) return bad("worker_pids", "a list of pids");
    for (const auto& v : it->second.list_value().values()) {
      if (!v.has_number_value() || v.number_value() <= 0) {
        return bad("worker_pids", "a list of positive pids");
      }
      st.worker_pids.push_back(static_cast<int>(v.number_value()));
    }
  }
  return st;
}

}  // namespace yoke::client
