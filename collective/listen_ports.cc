#include "collective/listen_ports.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace yoke::collective {
namespace {

// One word, so a bind never sees half of a range: first << 16 | last.
std::atomic<uint32_t> g_range{0};
std::atomic<int64_t> g_exhausted{0};
std::atomic<uint32_t> g_next{0};

int RawBind(int fd, const sockaddr* addr, socklen_t len) {
  return static_cast<int>(syscall(SYS_bind, fd, addr, len));
}

uint16_t* PortOf(sockaddr_storage* ss) {
  if (ss->ss_family == AF_INET) return &reinterpret_cast<sockaddr_in*>(ss)->sin_port;
  if (ss->ss_family == AF_INET6) return &reinterpret_cast<sockaddr_in6*>(ss)->sin6_port;
  return nullptr;
}

// The range search behind bind(): -1 with errno when no port of the range
// could be bound, or when the kernel refused for another reason.
int BindInRange(int fd, const sockaddr* addr, socklen_t len, int first, int last) {
  sockaddr_storage ss;
  std::memcpy(&ss, addr, len);
  uint16_t* port = PortOf(&ss);
  int reuse = 0;
  socklen_t reuse_len = sizeof(reuse);
  const bool had_reuse = getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, &reuse_len) == 0 && reuse;
  const int off = 0;
  if (had_reuse) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &off, sizeof(off));
  const int n = last - first + 1;
  // Start where the last search of this process stopped, so the ranks of
  // one trainer do not all probe the same taken ports first.
  const uint32_t start = g_next.fetch_add(1, std::memory_order_relaxed);
  int rc = -1, err = EADDRINUSE;
  for (int i = 0; i < n; ++i) {
    *port = htons(static_cast<uint16_t>(first + (start + i) % n));
    rc = RawBind(fd, reinterpret_cast<const sockaddr*>(&ss), len);
    if (rc == 0) break;
    err = errno;
    if (err != EADDRINUSE) break;
  }
  if (rc != 0 && err == EADDRINUSE) g_exhausted.fetch_add(1, std::memory_order_relaxed);
  if (had_reuse) {
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  }
  if (rc != 0) errno = err;
  return rc;
}

}  // namespace

void SetListenPortRange(PortRange range) {
  g_range.store(range.empty() ? 0
                              : (static_cast<uint32_t>(range.first) << 16) |
                                    static_cast<uint32_t>(range.last));
}

PortRange ListenPortRange() {
  const uint32_t r = g_range.load();
  if (r == 0) return {};
  return PortRange{static_cast<int>(r >> 16), static_cast<int>(r & 0xffff)};
}

int64_t ListenPortRangeExhaustions() { return g_exhausted.load(); }

}  // namespace yoke::collective

// Replaces libc's bind for the whole process (this object is linked only
// into binaries that set a range; see the header).
extern "C" int bind(int fd, const sockaddr* addr, socklen_t len) {
  const yoke::collective::PortRange r = yoke::collective::ListenPortRange();
  if (r.empty() || addr == nullptr || len > static_cast<socklen_t>(sizeof(sockaddr_storage)) ||
      (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)) {
    return yoke::collective::RawBind(fd, addr, len);
  }
  const uint16_t port = addr->sa_family == AF_INET
                            ? reinterpret_cast<const sockaddr_in*>(addr)->sin_port
                            : reinterpret_cast<const sockaddr_in6*>(addr)->sin6_port;
  int type = 0;
  socklen_t type_len = sizeof(type);
  if (port != 0 || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) != 0 ||
      type != SOCK_STREAM) {
    return yoke::collective::RawBind(fd, addr, len);
  }
  return yoke::collective::BindInRange(fd, addr, len, r.first, r.last);
}
