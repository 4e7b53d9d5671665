#include "net/http_server.h"

#include <civetweb.h>

#include <cstring>
#include <exception>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"

namespace yoke::common {
namespace {

std::string Header(mg_connection* conn, const char* name) {
  const char* v = mg_get_header(conn, name);
  return v == nullptr ? "" : v;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 302:
      return "Found";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

void Send(mg_connection* conn, const HttpResponse& r, bool head) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", r.status, " ", Reason(r.status),
                   "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                   "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff"
                   "\r\nConnection: close\r\n");
  for (const auto& [k, v] : r.headers) absl::StrAppend(&out, k, ": ", v, "\r\n");
  absl::StrAppend(&out, "\r\n");
  if (!head) out += r.body;
  mg_write(conn, out.data(), out.size());
}

}  // namespace

std::string HttpRequest::QueryParam(const std::string& name) const {
  for (absl::string_view kv : absl::StrSplit(query, '&')) {
    std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first != name) continue;
    std::string v(p.second);
    std::string out(v.size() + 1, '\0');
    const int n = mg_url_decode(v.data(), static_cast<int>(v.size()), out.data(),
                                static_cast<int>(out.size()), /*is_form_url_encoded=*/1);
    out.resize(n < 0 ? 0 : n);
    return out;
  }
  return "";
}

std::string HttpRequest::Cookie(const std::string& name) const {
  for (absl::string_view kv : absl::StrSplit(cookie, ';')) {
    kv = absl::StripLeadingAsciiWhitespace(kv);
    if (absl::ConsumePrefix(&kv, name) && absl::ConsumePrefix(&kv, "=")) return std::string(kv);
  }
  return "";
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, std::vector<std::pair<std::string, HttpHandler>> routes) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address '", listen, "': want HOST:PORT"));
  }
  mg_init_library(0);
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->routes_ = std::move(routes);
  // civetweb copies the options. No document_root: nothing is served from
  // disk; a slow client is cut off after 10 s.
  const char* options[] = {
      "listening_ports", listen.c_str(),      "num_threads", "4",    "request_timeout_ms",
      "10000",           "enable_keep_alive", "no",          nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.begin_request = &HttpServer::OnRequest;
  // civetweb logs bind failures through log_message; keep them for the error.
  callbacks.log_message = [](const mg_connection*, const char* message) {
    spdlog::debug("http: {}", message);
    return 1;
  };
  s->ctx_ = mg_start(&callbacks, s.get(), options);
  if (s->ctx_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", listen, ": the address is in use or not local"));
  }
  mg_server_port ports[1];
  if (mg_get_server_ports(s->ctx_, 1, ports) < 1) {
    return absl::InternalError(absl::StrCat("HTTP on ", listen, ": no listening port"));
  }
  s->port_ = ports[0].port;
  s->address_ = absl::StrCat(listen.substr(0, colon), ":", s->port_);
  return s;
}

HttpServer::~HttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

const HttpHandler* HttpServer::Route(const std::string& path) const {
  const HttpHandler* best = nullptr;
  size_t best_len = 0;
  for (const auto& [route, handler] : routes_) {
    const bool prefix = !route.empty() && route.back() == '/' && route.size() > 1;
    const bool match = prefix ? absl::StartsWith(path, route) : path == route;
    if (match && route.size() >= best_len) {
      best = &handler;
      best_len = route.size();
    }
  }
  return best;
}

int HttpServer::OnRequest(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  auto* self = static_cast<HttpServer*>(mg_get_user_data(mg_get_context(conn)));
  HttpRequest req;
  req.method = info->request_method ? info->request_method : "";
  req.path = info->local_uri ? info->local_uri : "/";
  req.query = info->query_string ? info->query_string : "";
  req.authorization = Header(conn, "Authorization");
  req.cookie = Header(conn, "Cookie");
  req.remote = info->remote_addr;
  const bool head = req.method == "HEAD";
  HttpResponse resp;
  if (req.method != "GET" && !head) {
    resp.status = 405;
    resp.body = "only GET and HEAD\n";
    resp.headers.push_back({"Allow", "GET, HEAD"});
  } else if (const HttpHandler* h = self->Route(req.path); h == nullptr) {
    resp.status = 404;
    resp.body = absl::StrCat("no page at ", req.path, "\n");
  } else {
    try {
      resp = (*h)(req);
    } catch (const std::exception& e) {
      spdlog::error("http: {} {}: {}", req.method, req.path, e.what());
      resp = HttpResponse{500, "text/plain; charset=utf-8", "internal error\n", {}};
    }
  }
  Send(conn, resp, head);
  return resp.status;  // non-zero: handled
}

}  // namespace yoke::common
