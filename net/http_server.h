// A small HTTP/1.1 server for the daemons' read-only pages: /metrics for
// Prometheus and the coordinator's dashboard. Built on Debian's civetweb;
// GET and HEAD only, no files served from disk, bodies never read.
//
// Routes match by exact path, or by prefix for a route that ends in '/'
// ("/api/job/" matches "/api/job/job-1"); the longest match wins. Anything
// else is 404, any other method 405. A handler that throws is a 500.
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

struct mg_context;
struct mg_connection;

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

class HttpServer {
 public:
  // Listens on `listen` ("host:port"; port 0 picks a free one). UNAVAILABLE
  // naming the address when it cannot be bound; INVALID_ARGUMENT for a
  // malformed address.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, std::vector<std::pair<std::string, HttpHandler>> routes);
  ~HttpServer();  // stops, waiting for handlers in flight

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // "host:port" with the bound port.
  const std::string& address() const { return address_; }

 private:
  HttpServer() = default;
  static int OnRequest(mg_connection* conn);
  const HttpHandler* Route(const std::string& path) const;

  std::vector<std::pair<std::string, HttpHandler>> routes_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
  std::string address_;
};

}  // namespace yoke::common

#endif  // YOKE_NET_HTTP_SERVER_H_
