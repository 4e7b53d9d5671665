#include "collective/gloo_bootstrap.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/listen_ports.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/device.h"

namespace yoke::collective {
namespace {

// Gloo's rendezvous store on top of ours. Gloo reports failure by throwing;
// the first failure's Status is kept so bootstrap can return it intact.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(collective::Store* base, absl::Duration timeout) : base_(base), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(base_->Set(Key(key), absl::string_view(data.data(), data.size())));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = base_->Get(Key(key), timeout_);
    Check(v.status());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, ToChronoMs(timeout_)); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
    for (const std::string& k : keys) {
      Check(base_->Get(Key(k), std::max(deadline - absl::Now(), absl::ZeroDuration())).status());
    }
  }

  const absl::Status& error() const { return error_; }

 private:
  static std::string Key(const std::string& k) { return absl::StrCat("gloo/", k); }
  void Check(const absl::Status& s) {
    if (s.ok()) return;
    if (error_.ok()) error_ = s;
    throw gloo::IoException(std::string(s.message()));
  }

  collective::Store* base_;
  absl::Duration timeout_;
  absl::Status error_;
};

// "10.0.0.5:41234" for an IPv4 or IPv6 socket address.
std::string SockaddrText(const sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
    port = ntohs(a->sin6_port);
    return absl::StrCat("[", ip, "]:", port);
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
  port = ntohs(a->sin_port);
  return absl::StrCat(ip, ":", port);
}

// A TCP connection attempt to `ss`, bounded by `timeout`: "" when it
// connects, else why not (strerror, or "timed out").
std::string ProbeConnect(const sockaddr_storage& ss, absl::Duration timeout) {
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::strerror(errno);
  const socklen_t len = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::string why;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) {
      why = std::strerror(errno);
    } else {
      pollfd p{fd, POLLOUT, 0};
      int n = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
      int err = 0;
      socklen_t el = sizeof(err);
      if (n == 0) {
        why = absl::StrCat("timed out after ", absl::FormatDuration(timeout));
      } else if (n < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) {
        why = std::strerror(errno);
      } else if (err != 0) {
        why = std::strerror(err);
      }
    }
  }
  ::close(fd);
  return why;
}

// After Gloo failed to connect this rank's pairs: finds the first peer this
// rank cannot reach, from the listening address the peer published in the
// store (Gloo's own error names neither the peer nor its address). Returns
// "" when every peer answers a probe (the failure was elsewhere).
std::string DiagnoseConnect(GlooStore* store, int rank, int size, const GlooOptions& o) {
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    std::vector<char> blob;
    try {
      blob = store->get(std::to_string(peer));
    } catch (const std::exception&) {
      continue;
    }
    // The peer published one address per pair (size - 1 of the same size);
    // all of them name its single listening socket.
    if (size < 2 || blob.empty() || blob.size() % (size - 1) != 0) continue;
    const size_t each = blob.size() / (size - 1);
    gloo::transport::tcp::Address addr(std::vector<char>(blob.begin(), blob.begin() + each));
    const std::string why = ProbeConnect(addr.getSockaddr(), absl::Seconds(3));
    if (why.empty()) continue;
    std::string self = absl::StrCat("rank ", rank);
    if (rank < static_cast<int>(o.rank_hosts.size())) {
      const std::string& h = o.rank_hosts[rank];
      absl::StrAppend(&self, " on ", h.substr(0, h.find('@')));
    } else {
      absl::StrAppend(&self, " on ", o.hostname);
    }
    std::string peer_name = absl::StrCat("rank ", peer, " at ", SockaddrText(addr.getSockaddr()));
    if (peer < static_cast<int>(o.rank_hosts.size())) {
      const std::string& h = o.rank_hosts[peer];
      absl::StrAppend(&peer_name, " (", h.substr(0, h.find('@')), ")");
    }
    return absl::StrCat(self, " could not connect to ", peer_name, ": ", why);
  }
  return "";
}

}  // namespace

void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

absl::StatusOr<std::shared_ptr<gloo::Context>> ConnectGloo(Store* store, int rank, int size,
                                                           const GlooOptions& options) {
  const std::string where =
      absl::StrCat("gloo: rank ", rank, " of ", size, " on ", options.hostname);
  GlooStore gstore(store, options.connect_timeout);
  std::shared_ptr<gloo::Context> context;
  const int64_t exhausted_before = ListenPortRangeExhaustions();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(ToChronoMs(options.connect_timeout));
    ctx->connectFullMesh(gstore, device);
    context = std::move(ctx);
  } catch (const std::exception& e) {
    if (ListenPortRangeExhaustions() != exhausted_before) {
      const PortRange r = ListenPortRange();
      return absl::ResourceExhaustedError(
          absl::StrCat(where, ": no free port in the data-plane port range ", r.ToString(), " (",
                       r.size(), " ports; each rank needs one per peer, ", size - 1,
                       " here): widen the worker's "
                       "data_ports (gloo: ",
                       e.what(), ")"));
    }
    if (!gstore.error().ok()) {
      return absl::Status(
          gstore.error().code(),
          absl::StrCat(where, ": bootstrap through the store: ", gstore.error().message()));
    }
    const std::string which = DiagnoseConnect(&gstore, rank, size, options);
    if (!which.empty()) {
      return absl::UnavailableError(absl::StrCat(which, " (gloo: ", e.what(), ")"));
    }
    return absl::UnavailableError(absl::StrCat(where, ": cannot connect: ", e.what()));
  }
  return context;
}

}  // namespace yoke::collective
