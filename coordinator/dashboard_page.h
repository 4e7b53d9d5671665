// The dashboard's one HTML page (coordinator/http_pages.h serves it at /,
// /job/ID and /workers; its script picks the view from the path).
#ifndef YOKE_COORDINATOR_DASHBOARD_PAGE_H_
#define YOKE_COORDINATOR_DASHBOARD_PAGE_H_

namespace yoke::server {

extern const char kDashboardHtml[];

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_DASHBOARD_PAGE_H_
