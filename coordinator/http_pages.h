// The coordinator's HTTP port: /metrics for Prometheus and a read-only web
// dashboard (docs/observability.md).
//
//   /metrics            Prometheus text exposition (coordinator/coordinator_metrics.h)
//   /  /job/ID  /workers  the dashboard's pages (one HTML page; its script
//                       fetches the JSON below every 2 s and draws the
//                       charts with Chart.js from Debian's libjs-chart.js)
//   /api/jobs           the newest 100 jobs (ListJobs, specs reduced to name)
//   /api/job/ID         one job, its curve of logged steps and its last logs
//   /api/workers        ListWorkers
//   /static/chart.min.js
//   /login?token=T      sets the token as an HttpOnly cookie, then goes to /
//
// Authentication is the API's: unless the coordinator runs --insecure, every
// path needs a bearer token (`yoke token create`; any role but worker) in
// the Authorization header (Prometheus: `authorization` in its scrape
// config) or in the cookie /login sets (browsers). The port is plain HTTP:
// it listens on loopback by default; to reach it from elsewhere put a TLS
// proxy in front, or `kubectl port-forward`.
#ifndef YOKE_COORDINATOR_HTTP_PAGES_H_
#define YOKE_COORDINATOR_HTTP_PAGES_H_

#include <string>
#include <utility>
#include <vector>

#include "net/http_server.h"

namespace yoke::server {

class AuthStore;
class Coordinator;
class CoordinatorMetrics;

struct HttpPagesOptions {
  Coordinator* coordinator = nullptr;     // required
  CoordinatorMetrics* metrics = nullptr;  // required
  AuthStore* auth = nullptr;              // null: no authentication (--insecure)
  // Chart.js; the dashboard draws no charts (and says so) if it is missing.
  std::string chart_js_path = "/usr/share/javascript/chart.js/chart.min.js";
};

std::vector<std::pair<std::string, common::HttpHandler>> CoordinatorHttpRoutes(
    const HttpPagesOptions& options);

// The HTTP address the coordinator uses by default for gRPC at `grpc_listen`:
// loopback, the gRPC port + 1 (0 when the gRPC port is 0).
std::string DefaultHttpListen(const std::string& grpc_listen);

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_HTTP_PAGES_H_
