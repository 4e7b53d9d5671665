#include "net/http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"

namespace yoke::common {
namespace {

using Clock = std::chrono::steady_clock;

// The most a request's line and headers may take; libmicrohttpd answers 431
// (or 414 for a long line) past it. Also bounds each connection's memory.
constexpr size_t kConnectionMemory = 32 * 1024;

// How long ~HttpServer waits for the replies of the handlers it let finish
// to be written (a client that reads none of its reply does not hold it up
// longer).
constexpr std::chrono::milliseconds kStopGrace(1000);

// One accepted connection, from libmicrohttpd's "started" notice to its
// "closed" one (the socket is closed only after that notice).
struct Conn {
  MHD_Connection* mhd = nullptr;
  int fd = -1;
  Clock::time_point accepted;
  bool dispatched = false;  // its headers are all in (Impl::mu)
  bool cut = false;         // shut down at the header timeout (Impl::mu)
  bool resumed = false;     // a worker gave it its reply (Impl::mu)
  std::string target;       // the raw request target, query included
  HttpRequest req;
  const HttpHandler* handler = nullptr;
  std::optional<HttpResponse> response;  // from a handler thread, then resumed
};

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// application/x-www-form-urlencoded: '+' is a space, %XX a byte; a '%' not
// followed by two hex digits stays as it is.
std::string FormDecode(absl::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out += ' ';
    } else if (in[i] == '%' && i + 2 < in.size() && HexDigit(in[i + 1]) >= 0 &&
               HexDigit(in[i + 2]) >= 0) {
      out += static_cast<char>(HexDigit(in[i + 1]) * 16 + HexDigit(in[i + 2]));
      i += 2;
    } else {
      out += in[i];
    }
  }
  return out;
}

std::string Header(MHD_Connection* c, const char* name) {
  const char* v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
  return v == nullptr ? "" : v;
}

std::string PeerAddress(MHD_Connection* c) {
  const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (info == nullptr || info->client_addr == nullptr) return "";
  char buf[INET6_ADDRSTRLEN] = "";
  const sockaddr* sa = info->client_addr;
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

HttpResponse Plain(int status, std::string body) {
  return HttpResponse{status, "text/plain; charset=utf-8", std::move(body), {}};
}

// Queues `r`; libmicrohttpd adds Content-Length and leaves the body out for
// HEAD. Every reply closes its connection.
MHD_Result Queue(MHD_Connection* c, const HttpResponse& r) {
  MHD_Response* resp = MHD_create_response_from_buffer(
      r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
  if (resp == nullptr) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", r.content_type.c_str());
  MHD_add_response_header(resp, "Cache-Control", "no-store");
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(resp, "Connection", "close");
  for (const auto& [k, v] : r.headers) {
    // Refused for a name or value with CR or LF in it.
    if (MHD_add_response_header(resp, k.c_str(), v.c_str()) != MHD_YES) {
      spdlog::warn("http: dropped a response header '{}' that is not valid", k);
    }
  }
  const unsigned status = r.status >= 100 && r.status <= 599 ? r.status : 500;
  const MHD_Result ok = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return ok;
}

void Log(void*, const char* fmt, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  spdlog::debug("http: {}", std::string(absl::StripTrailingAsciiWhitespace(buf)));
}

}  // namespace

std::string HttpRequest::QueryParam(const std::string& name) const {
  for (absl::string_view kv : absl::StrSplit(query, '&')) {
    std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first == name) return FormDecode(p.second);
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

// libmicrohttpd runs one epoll thread that reads requests and writes replies
// for every connection. A request whose route has a handler is suspended
// there and handed to `workers`, which resume it with the reply, so a slow
// handler holds up nobody but the requests queued behind the busy workers.
// `reaper` cuts connections whose headers are not in by the header timeout
// (libmicrohttpd's own timeout restarts with every byte received).
struct HttpServer::Impl {
  std::vector<std::pair<std::string, HttpHandler>> routes;
  HttpServerLimits limits;
  MHD_Daemon* daemon = nullptr;

  std::mutex mu;
  std::condition_variable work_cv;  // `queue` grew, or `stopping`
  std::condition_variable stop_cv;  // `stopping`
  std::condition_variable sent_cv;  // `replying` fell
  std::unordered_set<Conn*> conns;
  std::deque<Conn*> queue;  // suspended, waiting for a worker
  int replying = 0;         // resumed with a reply, not closed yet
  bool stopping = false;
  std::vector<std::thread> workers;
  std::thread reaper;

  ~Impl() {
    {
      std::lock_guard<std::mutex> l(mu);
      stopping = true;
    }
    work_cv.notify_all();
    stop_cv.notify_all();
    // The workers finish the handlers in flight and answer the queue with
    // 503, resuming every suspended connection; libmicrohttpd must not be
    // stopped with one still suspended.
    for (std::thread& t : workers) t.join();
    if (reaper.joinable()) reaper.join();
    // Give their replies a moment to go out: stopping libmicrohttpd closes
    // every connection at once, sent or not.
    {
      std::unique_lock<std::mutex> l(mu);
      sent_cv.wait_for(l, kStopGrace, [&] { return replying == 0; });
    }
    if (daemon != nullptr) MHD_stop_daemon(daemon);  // closes all connections
  }

  const HttpHandler* Route(const std::string& path) const {
    const HttpHandler* best = nullptr;
    size_t best_len = 0;
    for (const auto& [route, handler] : routes) {
      const bool prefix = !route.empty() && route.back() == '/' && route.size() > 1;
      const bool match = prefix ? absl::StartsWith(path, route) : path == route;
      if (match && route.size() >= best_len) {
        best = &handler;
        best_len = route.size();
      }
    }
    return best;
  }

  void Work() {
    for (;;) {
      Conn* c = nullptr;
      bool stop = false;
      {
        std::unique_lock<std::mutex> l(mu);
        work_cv.wait(l, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        c = queue.front();
        queue.pop_front();
        stop = stopping;
      }
      // The connection stays suspended (and `c` alive) until resumed.
      if (stop) {
        c->response = Plain(503, "the server is stopping\n");
      } else {
        try {
          c->response = (*c->handler)(c->req);
        } catch (const std::exception& e) {
          spdlog::error("http: {} {}: {}", c->req.method, c->req.path, e.what());
          c->response = Plain(500, "internal error\n");
        }
      }
      {
        std::lock_guard<std::mutex> l(mu);
        c->resumed = true;
        ++replying;
      }
      MHD_resume_connection(c->mhd);
    }
  }

  void Reap() {
    const auto timeout = std::chrono::milliseconds(limits.header_timeout_ms);
    const auto tick =
        std::clamp(timeout / 10, std::chrono::milliseconds(10), std::chrono::milliseconds(250));
    std::unique_lock<std::mutex> l(mu);
    while (!stop_cv.wait_for(l, tick, [&] { return stopping; })) {
      const Clock::time_point now = Clock::now();
      for (Conn* c : conns) {
        if (c->dispatched || c->cut || now - c->accepted < timeout) continue;
        // The socket is still open: libmicrohttpd closes it only after its
        // "closed" notice, which waits for `mu`. It sees end of stream and
        // closes the connection.
        shutdown(c->fd, SHUT_RDWR);
        c->cut = true;
      }
    }
  }

  static void OnConnection(void* cls, MHD_Connection* mc, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      auto* c = new Conn;
      c->mhd = mc;
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
      c->fd = info == nullptr ? -1 : info->connect_fd;
      c->accepted = Clock::now();
      c->cut = c->fd < 0;
      std::lock_guard<std::mutex> l(self->mu);
      self->conns.insert(c);
      *socket_context = c;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context != nullptr) {
      auto* c = static_cast<Conn*>(*socket_context);
      {
        std::lock_guard<std::mutex> l(self->mu);
        self->conns.erase(c);
        if (c->resumed && --self->replying == 0) self->sent_cv.notify_all();
      }
      delete c;
      *socket_context = nullptr;
    }
  }

  // Called once the request line is in, with the target as sent; its result
  // is the request's context in OnRequest.
  static void* OnRequestLine(void*, const char* uri, MHD_Connection* mc) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    auto* c = info == nullptr ? nullptr : static_cast<Conn*>(info->socket_context);
    if (c != nullptr) c->target = uri;
    return c;
  }

  // Called when the headers are all in, and again after a worker resumes
  // the connection.
  static MHD_Result OnRequest(void* cls, MHD_Connection* mc, const char* url, const char* method,
                              const char*, const char*, size_t*, void** con_cls) {
    auto* self = static_cast<Impl*>(cls);
    auto* c = static_cast<Conn*>(*con_cls);
    if (c == nullptr) return MHD_NO;
    if (c->response.has_value()) return Queue(mc, *c->response);
    {
      std::lock_guard<std::mutex> l(self->mu);
      c->dispatched = true;
    }
    HttpRequest& req = c->req;
    req.method = method;
    req.path = url;  // decoded by libmicrohttpd, without the query
    const size_t q = c->target.find('?');
    req.query = q == std::string::npos ? "" : c->target.substr(q + 1);
    req.authorization = Header(mc, "Authorization");
    req.cookie = Header(mc, "Cookie");
    req.remote = PeerAddress(mc);
    if (req.method != "GET" && req.method != "HEAD") {
      HttpResponse r = Plain(405, "only GET and HEAD\n");
      r.headers.push_back({"Allow", "GET, HEAD"});
      return Queue(mc, r);
    }
    c->handler = self->Route(req.path);
    if (c->handler == nullptr)
      return Queue(mc, Plain(404, absl::StrCat("no page at ", req.path, "\n")));
    {
      std::lock_guard<std::mutex> l(self->mu);
      if (!self->stopping) {
        MHD_suspend_connection(mc);
        self->queue.push_back(c);
        self->work_cv.notify_one();
        return MHD_YES;
      }
    }
    return Queue(mc, Plain(503, "the server is stopping\n"));
  }
};

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}

HttpServer::~HttpServer() = default;

namespace {

absl::Status CheckLimits(const HttpServerLimits& l) {
  if (l.header_timeout_ms > 0 && l.idle_timeout_s > 0 && l.max_connections > 0 &&
      l.max_connections_per_peer > 0 && l.handler_threads > 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("HTTP server limits must all be positive");
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, std::vector<std::pair<std::string, HttpHandler>> routes,
    const HttpServerLimits& limits) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address '", listen, "': want HOST:PORT"));
  }
  if (absl::Status st = CheckLimits(limits); !st.ok()) return st;
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  const std::string port_str = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_str.c_str(), &hints, &ai) != 0 || ai == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", listen, ": cannot resolve '", host, "'"));
  }
  std::unique_ptr<HttpServer> s(new HttpServer());
  Impl& impl = *s->impl_;
  impl.routes = std::move(routes);
  impl.limits = limits;
  for (int i = 0; i < limits.handler_threads; ++i)
    impl.workers.emplace_back([&impl] { impl.Work(); });
  impl.reaper = std::thread([&impl] { impl.Reap(); });

  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                   MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  impl.daemon = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Impl::OnRequest, &impl,  //
      MHD_OPTION_EXTERNAL_LOGGER, &Log, nullptr,            //
      MHD_OPTION_SOCK_ADDR, ai->ai_addr,                    //
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(limits.idle_timeout_s),
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(limits.max_connections),
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, static_cast<unsigned>(limits.max_connections_per_peer),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory,     //
      MHD_OPTION_NOTIFY_CONNECTION, &Impl::OnConnection, &impl,  //
      MHD_OPTION_URI_LOG_CALLBACK, &Impl::OnRequestLine, &impl, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (impl.daemon == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", listen, ": the address is in use or not local"));
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(impl.daemon, MHD_DAEMON_INFO_BIND_PORT);
  if (info == nullptr || info->port == 0) {
    return absl::InternalError(absl::StrCat("HTTP on ", listen, ": no listening port"));
  }
  s->port_ = info->port;
  s->address_ = absl::StrCat(listen.substr(0, colon), ":", s->port_);
  return s;
}

}  // namespace yoke::common
