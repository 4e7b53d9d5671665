// The data-plane port range: bind() itself, then real Gloo ranks (threads of
// this process over loopback) whose published addresses must lie in it.
#include "collective/listen_ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "collective/gloo_communicator.h"
#include "collective/store.h"
#include "collective/testing/gloo_ranks.h"
#include "gloo/transport/tcp/address.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

// Clears the process's range whatever the test does.
class ListenPortsTest : public ::testing::Test {
 protected:
  void TearDown() override { SetListenPortRange({}); }
};

int TcpSocket(bool reuse) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int on = reuse ? 1 : 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  return fd;
}

int BindLoopback(int fd, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
}

int PortOf(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// `n` consecutive ports on loopback that nothing holds now, below the
// kernel's ephemeral range so that no outgoing connection takes one.
PortRange FreeRange(int n) {
  for (int base = 20000 + (getpid() % 500) * 16; base < 32000; base += 16) {
    bool all_free = true;
    for (int p = base; p < base + n && all_free; ++p) {
      const int fd = TcpSocket(false);
      SetListenPortRange({});
      all_free = BindLoopback(fd, p) == 0;
      close(fd);
    }
    if (all_free) return PortRange{base, base + n - 1};
  }
  ADD_FAILURE() << "no " << n << " free consecutive ports below 32000";
  return {};
}

TEST_F(ListenPortsTest, PortZeroBindsLandInTheRangeAndNamedPortsAreUntouched) {
  const PortRange range = FreeRange(4);
  SetListenPortRange(range);
  std::vector<int> fds;
  std::vector<int> ports;
  // SO_REUSEADDR on every socket, none listening: the kernel alone would let
  // them share a port, the range search must not.
  for (int i = 0; i < range.size(); ++i) {
    fds.push_back(TcpSocket(true));
    ASSERT_EQ(BindLoopback(fds.back(), 0), 0) << "socket " << i;
    ports.push_back(PortOf(fds.back()));
    EXPECT_GE(ports.back(), range.first);
    EXPECT_LE(ports.back(), range.last);
    int reuse = 0;
    socklen_t len = sizeof(reuse);
    getsockopt(fds.back(), SOL_SOCKET, SO_REUSEADDR, &reuse, &len);
    EXPECT_EQ(reuse, 1) << "the caller's SO_REUSEADDR comes back";
  }
  std::sort(ports.begin(), ports.end());
  EXPECT_EQ(std::unique(ports.begin(), ports.end()), ports.end()) << "two sockets on one port";
  // The range is full: the next bind fails as the kernel's would.
  const int64_t before = ListenPortRangeExhaustions();
  const int extra = TcpSocket(true);
  EXPECT_EQ(BindLoopback(extra, 0), -1);
  EXPECT_EQ(errno, EADDRINUSE);
  EXPECT_EQ(ListenPortRangeExhaustions(), before + 1);
  // A named port and a UDP socket go to the kernel as they are.
  const int named = TcpSocket(false);
  const PortRange other = FreeRange(1);
  SetListenPortRange(range);
  ASSERT_EQ(BindLoopback(named, other.first), 0);
  EXPECT_EQ(PortOf(named), other.first);
  const int udp = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(udp, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  // With the range off, port 0 is the kernel's choice again.
  SetListenPortRange({});
  EXPECT_EQ(BindLoopback(extra, 0), 0);
  EXPECT_GT(PortOf(extra), 0);
  for (int fd : fds) close(fd);
  for (int fd : {extra, named, udp}) close(fd);
}

TEST_F(ListenPortsTest, GlooRanksListenOnlyInsideTheRange) {
  constexpr int kRanks = 3;
  const PortRange range = FreeRange(kRanks * (kRanks - 1));
  SetListenPortRange(range);
  InMemoryStore store;
  auto comms = testing::ConnectGloo(kRanks, &store);
  ASSERT_EQ(comms.size(), static_cast<size_t>(kRanks));
  // What each rank published for its peers: one address per pair.
  for (int r = 0; r < kRanks; ++r) {
    auto blob = store.Get("gloo/" + std::to_string(r), absl::Seconds(1));
    ASSERT_TRUE(blob.ok()) << blob.status();
    const size_t each = blob->size() / (kRanks - 1);
    for (int p = 0; p < kRanks - 1; ++p) {
      gloo::transport::tcp::Address addr(
          std::vector<char>(blob->begin() + p * each, blob->begin() + (p + 1) * each));
      const auto& ss = addr.getSockaddr();
      const int port = ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
      EXPECT_GE(port, range.first) << "rank " << r << " pair " << p;
      EXPECT_LE(port, range.last) << "rank " << r << " pair " << p;
    }
  }
  // And they work.
  testing::OnEveryRank(comms, [&](int r, Communicator& c) {
    float x = static_cast<float>(r + 1);
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    auto w = c.Allreduce(Buffer{&x, 1, DataType::kF32}, o);
    ASSERT_TRUE(w->Wait().ok()) << w->Wait();
    EXPECT_EQ(x, 6.0f);
  });
}

TEST_F(ListenPortsTest, ATooSmallRangeIsAClearErrorNotAHang) {
  SetListenPortRange(FreeRange(1));
  InMemoryStore store;
  GlooOptions o;
  o.connect_timeout = absl::Seconds(3);
  std::vector<absl::Status> status(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] { status[r] = CreateGlooCommunicator(&store, r, 3, o).status(); });
  }
  for (auto& t : threads) t.join();
  int named = 0;
  for (const absl::Status& s : status) {
    EXPECT_FALSE(s.ok());
    if (absl::StrContains(s.message(), "no free port in the data-plane port range")) ++named;
  }
  EXPECT_GE(named, 1) << status[0] << "\n" << status[1] << "\n" << status[2];
}

}  // namespace
}  // namespace yoke::collective
