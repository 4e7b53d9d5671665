#include "coordinator/http_pages.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "coordinator/auth_store.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/dashboard_page.h"
#include "google/protobuf/util/json_util.h"
#include "telemetry/train_metrics.h"

namespace yoke::server {
namespace {

using common::HttpRequest;
using common::HttpResponse;

constexpr char kCookie[] = "yoke_token";

HttpResponse Json(std::string body) {
  return HttpResponse{200, "application/json", std::move(body), {}};
}

HttpResponse Error(int status, std::string message) {
  return HttpResponse{status, "text/plain; charset=utf-8", message + "\n", {}};
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  if (!google::protobuf::util::MessageToJsonString(m, &out, o).ok()) return "{}";
  return out;
}

// A JSON string literal.
std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == '<' || c == '>' || c == '&') {
          absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// The token a request carries: the bearer token, else the cookie.
std::string TokenOf(const HttpRequest& r) {
  absl::string_view auth = r.authorization;
  if (absl::ConsumePrefix(&auth, "Bearer ")) return std::string(absl::StripAsciiWhitespace(auth));
  return r.Cookie(kCookie);
}

// Empty when the token may read the dashboard; else why not.
std::string CheckToken(const AuthStore* auth, const std::string& token) {
  if (token.empty()) {
    return "authentication required: send a bearer token (`yoke token create --role viewer "
           "--name NAME`) in the Authorization header, or open /login?token=TOKEN in a browser";
  }
  auto info = auth->CheckToken(token, absl::Now());
  if (!info.ok()) return std::string(info.status().message());
  if (info->role == common::Role::kWorker || info->role == common::Role::kCoordinator) {
    return absl::StrCat("token '", info->name, "' has role ", common::RoleName(info->role),
                        ", which may not read the dashboard");
  }
  return "";
}

// Wraps `h` with the API's authentication.
common::HttpHandler Guard(const AuthStore* auth, common::HttpHandler h) {
  if (auth == nullptr) return h;
  return [auth, h = std::move(h)](const HttpRequest& r) {
    const std::string why = CheckToken(auth, TokenOf(r));
    if (!why.empty()) {
      HttpResponse resp = Error(401, why);
      resp.headers.push_back({"WWW-Authenticate", "Bearer realm=\"yoke\""});
      return resp;
    }
    return h(r);
  };
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::string DefaultHttpListen(const std::string& grpc_listen) {
  int port = 0;
  const size_t colon = grpc_listen.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(grpc_listen.substr(colon + 1), &port)) {
    port = 0;
  }
  return absl::StrCat("127.0.0.1:", port > 0 && port < 65535 ? port + 1 : 0);
}

std::vector<std::pair<std::string, common::HttpHandler>> CoordinatorHttpRoutes(
    const HttpPagesOptions& options) {
  Coordinator* c = options.coordinator;
  CoordinatorMetrics* m = options.metrics;
  const AuthStore* auth = options.auth;
  std::vector<std::pair<std::string, common::HttpHandler>> routes;
  auto add = [&](std::string path, common::HttpHandler h) {
    routes.emplace_back(std::move(path), Guard(auth, std::move(h)));
  };

  add("/metrics", [c, m](const HttpRequest&) {
    CoordinatorView view;
    view.job_counts = [c] { return c->CountJobsByState(); };
    view.workers = [c] { return c->ListWorkers(); };
    view.running_jobs = [c] { return c->RunningJobs(); };
    view.now_ms = [] { return absl::ToUnixMillis(absl::Now()); };
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", m->Exposition(view), {}};
  });

  auto page = [](const HttpRequest&) {
    return HttpResponse{200,
                        "text/html; charset=utf-8",
                        kDashboardHtml,
                        {{"Content-Security-Policy",
                          "default-src 'self'; script-src 'self' 'unsafe-inline'; "
                          "style-src 'unsafe-inline'; frame-ancestors 'none'"}}};
  };
  add("/", page);
  add("/workers", page);
  add("/job/", page);

  add("/api/jobs", [c](const HttpRequest&) {
    JobListQuery q;
    q.page_size = 100;
    q.summary = true;  // the table shows the names only
    auto page = c->List(q);
    if (!page.ok()) return Error(503, std::string(page.status().message()));
    v1::ListJobsResponse resp;
    for (v1::Job& j : page->jobs) *resp.add_jobs() = std::move(j);
    return Json(ToJson(resp));
  });

  add("/api/job/", [c](const HttpRequest& r) {
    const std::string id = r.path.substr(std::string("/api/job/").size());
    auto job = c->Get(id);
    if (!job.ok()) return Error(404, std::string(job.status().message()));
    std::string out = absl::StrCat(
        "{\"job\":", ToJson(*job),
        ",\"breakdown\":", Quote(common::FormatBreakdown(common::BreakdownOf(job->progress()))),
        ",\"curve\":[");
    bool first = true;
    for (const CurvePoint& p : c->Curve(id)) {
      absl::StrAppend(&out, first ? "" : ",", "{\"step\":", p.step,
                      absl::StrFormat(",\"loss\":%.6g,\"accuracy\":%.6g}", p.loss, p.accuracy));
      first = false;
    }
    absl::StrAppend(&out, "],\"logs\":[");
    first = true;
    if (auto logs = c->TailLogs(id, 50); logs.ok()) {
      for (const v1::LogLine& l : *logs) {
        absl::StrAppend(&out, first ? "" : ",", Quote(l.text()));
        first = false;
      }
    }
    return Json(out + "]}");
  });

  add("/api/workers", [c](const HttpRequest&) {
    v1::ListWorkersResponse resp;
    for (v1::Worker& w : c->ListWorkers()) *resp.add_workers() = std::move(w);
    return Json(ToJson(resp));
  });

  const std::string chart_js = ReadAll(options.chart_js_path);
  add("/static/chart.min.js", [chart_js](const HttpRequest&) {
    if (chart_js.empty()) return Error(404, "Chart.js is not installed (Debian's libjs-chart.js)");
    return HttpResponse{
        200, "text/javascript; charset=utf-8", chart_js, {{"Cache-Control", "max-age=3600"}}};
  });

  // Not guarded: it is where a browser brings its token.
  routes.emplace_back("/login", [auth](const HttpRequest& r) {
    std::string next = r.QueryParam("next");
    // Only a path of this server: no scheme, no host, no "//".
    if (next.empty() || next[0] != '/' || absl::StartsWith(next, "//") ||
        next.find_first_of("\\\r\n") != std::string::npos) {
      next = "/";
    }
    const std::string token = r.QueryParam("token");
    if (auth != nullptr) {
      const std::string why = CheckToken(auth, token);
      if (!why.empty()) return Error(401, why);
    }
    HttpResponse resp{302, "text/plain; charset=utf-8", "logged in\n", {{"Location", next}}};
    if (auth != nullptr) {
      resp.headers.push_back(
          {"Set-Cookie", absl::StrCat(kCookie, "=", token, "; Path=/; HttpOnly; SameSite=Strict")});
    }
    return resp;
  });
  return routes;
}

}  // namespace yoke::server
