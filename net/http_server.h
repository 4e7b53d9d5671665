// A small HTTP/1.1 server for the daemons' read-only pages: /metrics for
// Prometheus and the coordinator's dashboard. Built on Debian's libmicrohttpd
// with one epoll thread for all connections, so that a client that is slow
// to send its request costs a socket, not a thread; handlers run on a small
// pool of their own. GET and HEAD only, no files served from disk, bodies
// never read, one request per connection.
//
// Routes match by exact path, or by prefix for a route that ends in '/'
// ("/api/job/" matches "/api/job/job-1"); the longest match wins. Anything
// else is 404, any other method 405. A handler that throws is a 500.
//
// Slow and greedy clients meet the HttpServerLimits below (issue 30); see
// docs/security.md for what each one sees.
//
// Thread-safety: handlers run on the server's threads, several at once.
#ifndef YOKE_NET_HTTP_SERVER_H_
#define YOKE_NET_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace yoke::common {

struct HttpRequest {
  std::string method;         // GET or HEAD
  std::string path;           // "/api/job/job-1" (no query)
  std::string query;          // "token=..." (undecoded), or ""
  std::string authorization;  // the Authorization header, or ""
  std::string cookie;         // the Cookie header, or ""
  std::string remote;         // the peer's address
  // The value of query parameter `name` (URL-decoded), or "".
  std::string QueryParam(const std::string& name) const;
  // The value of cookie `name`, or "".
  std::string Cookie(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// The bounds that keep slow or greedy clients from starving the port. The
// defaults are what the daemons use; tests shorten them.
struct HttpServerLimits {
  // From the connection's accept until its request's headers are all in;
  // past it the connection is closed without a reply, however busily the
  // client is still sending.
  int header_timeout_ms = 5000;
  // While the reply is written: a connection that takes nothing for this
  // long is closed. Whole seconds (libmicrohttpd's unit).
  int idle_timeout_s = 10;
  // Connections open at once. At the limit the server stops accepting: new
  // connections wait in the kernel's backlog until one closes.
  int max_connections = 512;
  // Connections open at once from one IP address; one more is accepted and
  // closed at once, without a reply.
  int max_connections_per_peer = 32;
  // Threads that run handlers; requests beyond them wait their turn.
  int handler_threads = 4;
};

class HttpServer {
 public:
  // Listens on `listen` ("host:port"; port 0 picks a free one). UNAVAILABLE
  // naming the address when it cannot be bound; INVALID_ARGUMENT for a
  // malformed address.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, std::vector<std::pair<std::string, HttpHandler>> routes,
      const HttpServerLimits& limits = {});
  // Stops: waits for handlers in flight, answers 503 to requests still
  // waiting for a handler thread, and closes every other connection.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // "host:port" with the bound port.
  const std::string& address() const { return address_; }

 private:
  struct Impl;
  HttpServer();

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::string address_;
};

}  // namespace yoke::common

#endif  // YOKE_NET_HTTP_SERVER_H_
