// The HTTP server over real sockets on loopback.
#include "net/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` raw to 127.0.0.1:port and returns all of the reply.
std::string Exchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "connect failed";
  }
  send(fd, request.data(), request.size(), 0);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

std::string Get(int port, const std::string& target, const std::string& headers = "") {
  return Exchange(port, absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: x\r\n", headers, "\r\n"));
}

std::unique_ptr<HttpServer> StartTestServer() {
  std::vector<std::pair<std::string, HttpHandler>> routes;
  routes.push_back({"/metrics", [](const HttpRequest&) {
                      return HttpResponse{200, "text/plain; version=0.0.4", "up 1\n", {}};
                    }});
  routes.push_back({"/api/job/", [](const HttpRequest& r) {
                      return HttpResponse{200,
                                          "application/json",
                                          absl::StrCat("{\"path\":\"", r.path, "\",\"token\":\"",
                                                       r.QueryParam("token"), "\",\"cookie\":\"",
                                                       r.Cookie("yoke_token"), "\",\"auth\":\"",
                                                       r.authorization, "\"}"),
                                          {{"Set-Cookie", "a=b"}}};
                    }});
  routes.push_back({"/api/job/special", [](const HttpRequest&) {
                      return HttpResponse{200, "text/plain", "longest match", {}};
                    }});
  routes.push_back({"/boom", [](const HttpRequest&) -> HttpResponse {
                      throw std::runtime_error("handler bug");
                    }});
  auto s = HttpServer::Start("127.0.0.1:0", std::move(routes));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(HttpServerTest, RoutesExactAndPrefixPathsWithTheirHeaders) {
  auto s = StartTestServer();
  ASSERT_NE(s, nullptr);
  EXPECT_GT(s->port(), 0);
  EXPECT_EQ(s->address(), absl::StrCat("127.0.0.1:", s->port()));

  std::string r = Get(s->port(), "/metrics");
  EXPECT_THAT(r, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(r, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(r, HasSubstr("Content-Length: 5"));
  EXPECT_THAT(r, HasSubstr("\r\n\r\nup 1\n"));

  r = Get(s->port(), "/api/job/job-7?x=1&token=a%2Bb%20c",
          "Cookie: other=1; yoke_token=secret\r\nAuthorization: Bearer t0k\r\n");
  EXPECT_THAT(r, HasSubstr("\"path\":\"/api/job/job-7\""));
  EXPECT_THAT(r, HasSubstr("\"token\":\"a+b c\""));
  EXPECT_THAT(r, HasSubstr("\"cookie\":\"secret\""));
  EXPECT_THAT(r, HasSubstr("\"auth\":\"Bearer t0k\""));
  EXPECT_THAT(r, HasSubstr("Set-Cookie: a=b"));
  EXPECT_THAT(Get(s->port(), "/api/job/special"), HasSubstr("longest match"));
}

TEST(HttpServerTest, UnknownPathsOtherMethodsAndThrowingHandlersGetStatusCodes) {
  auto s = StartTestServer();
  ASSERT_NE(s, nullptr);
  EXPECT_THAT(Get(s->port(), "/nothing"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(Get(s->port(), "/metrics/more"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(Get(s->port(), "/etc/passwd"), StartsWith("HTTP/1.1 404"));
  std::string post =
      Exchange(s->port(), "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(post, HasSubstr("Allow: GET, HEAD"));
  EXPECT_THAT(Get(s->port(), "/boom"), StartsWith("HTTP/1.1 500"));
  // HEAD: the headers without the body.
  std::string head = Exchange(s->port(), "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(head, ::testing::Not(HasSubstr("up 1")));
  // Garbage is refused and the server stays up.
  Exchange(s->port(), std::string(100000, 'x') + "\r\n\r\n");
  EXPECT_THAT(Get(s->port(), "/metrics"), StartsWith("HTTP/1.1 200"));
}

TEST(HttpServerTest, ABusyPortOrABadAddressIsAClearError) {
  auto s = StartTestServer();
  ASSERT_NE(s, nullptr);
  auto again = HttpServer::Start(s->address(), {});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(again.status().message(), HasSubstr(s->address()));
  for (const char* bad : {"nohost", "127.0.0.1:x", "127.0.0.1:70000", ":80"}) {
    auto r = HttpServer::Start(bad, {});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr(bad));
  }
}

}  // namespace
}  // namespace yoke::common
