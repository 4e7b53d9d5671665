#include "worker/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace yoke::worker {

absl::Status SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  if (!address.empty() && address[0] == '[') {
    size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", address, "': expected [IPv6]:PORT"));
    }
    *host = address.substr(1, close - 1);
    *port = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", address, "': expected HOST:PORT"));
    }
    *host = address.substr(0, colon);
    *port = address.substr(colon + 1);
  }
  if (port->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("address '", address, "': no port"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LocalAddressTowards(const std::string& host_port) {
  std::string host, port;
  if (absl::Status s = SplitHostPort(host_port, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host_port, ": ", ::gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    // connect() on a UDP socket only picks the route and the source address.
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    int rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    ::close(fd);
    if (rc != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    char text[INET6_ADDRSTRLEN] = {};
    const void* a =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (::inet_ntop(local.ss_family, a, text, sizeof(text)) == nullptr) {
      last_error = std::strerror(errno);
      continue;
    }
    ::freeaddrinfo(res);
    return std::string(text);
  }
  ::freeaddrinfo(res);
  return absl::UnavailableError(
      absl::StrCat("no route to the coordinator at ", host_port, ": ", last_error));
}

bool IsLoopback(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  return absl::StartsWith(host, "localhost.");
}

absl::StatusOr<std::string> ResolveAdvertiseAddress(const std::string& configured,
                                                    const std::string& coordinator) {
  std::string coord_host, coord_port;
  if (absl::Status s = SplitHostPort(coordinator, &coord_host, &coord_port); !s.ok()) return s;
  std::string address = configured;
  if (address.empty()) {
    absl::StatusOr<std::string> local = LocalAddressTowards(coordinator);
    if (!local.ok()) {
      return absl::Status(
          local.status().code(),
          absl::StrCat("cannot find the address to advertise to peers (", local.status().message(),
                       "); set advertise_address, --advertise-address or "
                       "YOKE_ADVERTISE_ADDRESS"));
    }
    address = *local;
  }
  if (IsLoopback(address) && !IsLoopback(coord_host)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "advertise address ", address, " is a loopback address, but the coordinator (", coordinator,
        ") is not on loopback: workers on other machines could not reach this one's trainers; "
        "set advertise_address, --advertise-address or YOKE_ADVERTISE_ADDRESS to an address "
        "of this machine that the other workers can reach"));
  }
  return address;
}

}  // namespace yoke::worker
