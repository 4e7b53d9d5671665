#include "coordinator/recorded_port.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace yoke::server {

std::string RecordedPortPath(const std::string& store_path) { return store_path + ".port"; }

bool KeepsItsPort(const std::string& listen, const std::string& store_path) {
  const size_t colon = listen.rfind(':');
  return colon != std::string::npos && listen.substr(colon + 1) == "0" && !store_path.empty() &&
         store_path != ":memory:";
}

std::optional<std::string> RecordedListen(const std::string& listen,
                                          const std::string& store_path) {
  if (!KeepsItsPort(listen, store_path)) return std::nullopt;
  std::ifstream in(RecordedPortPath(store_path));
  std::string text;
  if (!in || !std::getline(in, text)) return std::nullopt;
  int port = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) || port < 1 || port > 65535) {
    return std::nullopt;
  }
  return absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
}

absl::Status RecordPort(const std::string& store_path, int port) {
  const std::string path = RecordedPortPath(store_path);
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    out.close();
    if (!out) {
      ::unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(e)));
  }
  return absl::OkStatus();
}

}  // namespace yoke::server
