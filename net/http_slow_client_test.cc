// The HTTP server against slow and silent clients (issue 30), over real
// sockets on loopback. The attackers connect from 127.0.0.2 and the scraper
// from 127.0.0.1, so that they are different peers, as Prometheus and a
// hostile client are.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/http_server.h"

namespace yoke::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void SetTimeouts(int fd, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // bounds connect() too
}

// A TCP connection from `from` (a loopback address) to 127.0.0.1:port, or -1.
int Connect(int port, const char* from, double timeout_s = 2) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  SetTimeouts(fd, timeout_s);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, from, &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until the server closes or the socket's receive timeout passes; ""
// if it sent nothing.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
  return out;
}

struct Timed {
  std::string reply;
  double seconds = 0;
};

// A whole GET from 127.0.0.1, timed from connect() to the server's close.
Timed TimedGet(int port, const std::string& path, double timeout_s = 5) {
  const Clock::time_point t0 = Clock::now();
  const int fd = Connect(port, "127.0.0.1", timeout_s);
  if (fd < 0) return {"connect failed", SecondsSince(t0)};
  const std::string req = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n\r\n");
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  Timed t{ReadAll(fd), 0};
  t.seconds = SecondsSince(t0);
  close(fd);
  return t;
}

// Whether the server has closed `fd` (EOF or reset), without blocking.
bool ClosedByServer(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// `n` connections from `peers` addresses (127.0.0.2 and up) that start a
// request and then send one more header line each every `every_s`, never
// finishing it.
class SlowClients {
 public:
  SlowClients(int port, int n, int peers, double every_s) {
    for (int i = 0; i < n; ++i) {
      const int fd = Connect(port, absl::StrCat("127.0.0.", 2 + i % peers).c_str());
      if (fd < 0) continue;
      Send(fd, "GET /metrics HTTP/1.1\r\n");
      fds_.push_back(fd);
    }
    dribbler_ = std::thread([this, every_s] {
      for (int line = 0; !stop_.load(); ++line) {
        const Clock::time_point t = Clock::now();
        while (!stop_.load() && SecondsSince(t) < every_s) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        for (int fd : fds_) Send(fd, absl::StrCat("X-Slow-", line, ": y\r\n"));
      }
    });
  }
  ~SlowClients() {
    stop_ = true;
    dribbler_.join();
    for (int fd : fds_) close(fd);
  }
  int connected() const { return static_cast<int>(fds_.size()); }
  int open() const {
    return static_cast<int>(
        std::count_if(fds_.begin(), fds_.end(), [](int fd) { return !ClosedByServer(fd); }));
  }

 private:
  static void Send(int fd, const std::string& s) {
    send(fd, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::thread dribbler_;
};

std::unique_ptr<HttpServer> StartServer(const HttpServerLimits& limits) {
  std::vector<std::pair<std::string, HttpHandler>> routes;
  routes.push_back({"/metrics", [](const HttpRequest&) {
                      return HttpResponse{200, "text/plain; version=0.0.4", "up 1\n", {}};
                    }});
  routes.push_back({"/slow", [](const HttpRequest&) {
                      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
                      return HttpResponse{200, "text/plain", "slow\n", {}};
                    }});
  auto s = HttpServer::Start("127.0.0.1:0", std::move(routes), limits);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(HttpSlowClientTest, TwoHundredSlowClientsDoNotDelayAScrape) {
  HttpServerLimits limits;
  limits.header_timeout_ms = 3000;
  auto s = StartServer(limits);
  ASSERT_NE(s, nullptr);
  const Clock::time_point t0 = Clock::now();
  // Ten peers, each under its connection limit: the server holds all 200.
  SlowClients slow(s->port(), 200, 10, 0.5);
  ASSERT_EQ(slow.connected(), 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // a header line or two each

  std::vector<double> took;
  for (int i = 0; i < 3; ++i) {
    Timed t = TimedGet(s->port(), "/metrics", 3);
    EXPECT_THAT(t.reply, StartsWith("HTTP/1.1 200"));
    EXPECT_THAT(t.reply, HasSubstr("\r\n\r\nup 1\n"));
    EXPECT_LT(t.seconds, 1.0) << "scrape " << i << " under 200 slow clients";
    took.push_back(t.seconds);
  }
  std::sort(took.begin(), took.end());
  std::printf("scrape under 200 slow clients: median %.4f s, max %.4f s\n", took[1], took[2]);
  EXPECT_EQ(slow.open(), 200) << "the slow clients were not all held while scraping";
  ASSERT_LT(SecondsSince(t0), 2.5) << "the slow clients must still be inside their header timeout";

  // They keep sending header lines, but the header timeout counts from the
  // connection's start, so the server cuts them all off.
  while (slow.open() > 0 && SecondsSince(t0) < 6) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(slow.open(), 0) << "slow clients still open after " << SecondsSince(t0) << " s";
  EXPECT_GT(SecondsSince(t0), 2.5) << "cut off before their header timeout";
  EXPECT_THAT(TimedGet(s->port(), "/metrics").reply, StartsWith("HTTP/1.1 200"));
}

TEST(HttpSlowClientTest, ASilentConnectionIsDroppedAfterTheHeaderTimeout) {
  HttpServerLimits limits;
  limits.header_timeout_ms = 1000;
  auto s = StartServer(limits);
  ASSERT_NE(s, nullptr);
  const Clock::time_point t0 = Clock::now();
  const int fd = Connect(s->port(), "127.0.0.2", /*timeout_s=*/4);
  ASSERT_GE(fd, 0);
  const std::string got = ReadAll(fd);  // returns at the server's close
  const double took = SecondsSince(t0);
  close(fd);
  EXPECT_EQ(got, "");
  EXPECT_GT(took, 0.9);
  EXPECT_LT(took, 2.5) << "a connection that sends nothing must be dropped";
}

TEST(HttpSlowClientTest, APeerOverItsLimitIsClosedAtOnceAndOthersAreServed) {
  HttpServerLimits limits;
  limits.max_connections_per_peer = 4;
  limits.max_connections = 6;
  auto s = StartServer(limits);
  ASSERT_NE(s, nullptr);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(Connect(s->port(), "127.0.0.2"));
  ASSERT_EQ(std::count(held.begin(), held.end(), -1), 0);
  // The fifth from the same peer: accepted and closed without a reply.
  const Clock::time_point t0 = Clock::now();
  const int extra = Connect(s->port(), "127.0.0.2");
  ASSERT_GE(extra, 0);
  EXPECT_EQ(ReadAll(extra), "");
  EXPECT_LT(SecondsSince(t0), 1.0);
  close(extra);
  // Another peer still gets its page.
  EXPECT_THAT(TimedGet(s->port(), "/metrics").reply, StartsWith("HTTP/1.1 200"));
  // Two more peers fill the global limit. Then a new connection waits in
  // the kernel's backlog, unanswered, until one of them closes.
  held.push_back(Connect(s->port(), "127.0.0.3"));
  held.push_back(Connect(s->port(), "127.0.0.4"));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::atomic<bool> done{false};
  Timed waited;
  std::thread scrape([&] {
    waited = TimedGet(s->port(), "/metrics");
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(done.load()) << "served past the global connection limit";
  close(held.back());
  held.pop_back();
  scrape.join();
  EXPECT_THAT(waited.reply, StartsWith("HTTP/1.1 200"));
  EXPECT_LT(waited.seconds, 1.5) << "not served once a slot was free";
  for (int fd : held) close(fd);
}

TEST(HttpSlowClientTest, ASlowHandlerDoesNotStallOtherRequests) {
  auto s = StartServer({});
  ASSERT_NE(s, nullptr);
  std::vector<std::thread> slow;
  std::vector<std::string> replies(2);
  for (int i = 0; i < 2; ++i) {
    slow.emplace_back([&, i] { replies[i] = TimedGet(s->port(), "/slow").reply; });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Timed t = TimedGet(s->port(), "/metrics");
  EXPECT_THAT(t.reply, StartsWith("HTTP/1.1 200"));
  EXPECT_LT(t.seconds, 0.5) << "a scrape waited for slow handlers";
  for (auto& th : slow) th.join();
  for (const auto& r : replies) EXPECT_THAT(r, HasSubstr("\r\n\r\nslow\n"));
}

TEST(HttpSlowClientTest, StoppingFinishesHandlersInFlightAndRefusesQueuedOnes) {
  HttpServerLimits limits;
  limits.handler_threads = 1;
  auto s = StartServer(limits);
  ASSERT_NE(s, nullptr);
  const int port = s->port();
  std::vector<std::string> replies(2);
  std::thread first([&] { replies[0] = TimedGet(port, "/slow").reply; });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // in its handler
  std::thread second([&] { replies[1] = TimedGet(port, "/slow").reply; });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // queued behind it
  const Clock::time_point t0 = Clock::now();
  s.reset();
  const double took = SecondsSince(t0);
  first.join();
  second.join();
  EXPECT_THAT(replies[0], HasSubstr("\r\n\r\nslow\n"));
  EXPECT_THAT(replies[1], StartsWith("HTTP/1.1 503"));
  EXPECT_GT(took, 0.3) << "did not wait for the handler in flight";
  EXPECT_LT(took, 1.5);
}

TEST(HttpSlowClientTest, StopsPromptlyWithSlowConnectionsOpen) {
  auto s = StartServer({});  // the default header timeout: far longer than the stop may take
  ASSERT_NE(s, nullptr);
  const int port = s->port();
  SlowClients slow(port, 200, 10, 0.5);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_GT(slow.open(), 0);
  const Clock::time_point t0 = Clock::now();
  s.reset();
  EXPECT_LT(SecondsSince(t0), 1.0) << "~HttpServer waited for slow clients";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(slow.open(), 0) << "connections left open after the server stopped";
  const int late = Connect(port, "127.0.0.1");
  EXPECT_EQ(late, -1) << "still listening after the server stopped";
  if (late >= 0) close(late);
}

}  // namespace
}  // namespace yoke::common
