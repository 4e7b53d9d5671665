#include "ps/runtime/links.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collective/gloo_bootstrap.h"
#include "common/status.h"
#include "gloo/context.h"

namespace yoke::ps {

namespace {

std::string LatestKey(int worker) { return absl::StrCat("w", worker, "/latest"); }

}  // namespace

std::string LinkPrefix(int worker, int64_t incarnation, int ps) {
  return absl::StrCat("w", worker, "/i", incarnation, "/p", ps, "/");
}

absl::Status AnnounceIncarnation(collective::Store* store, int worker, int64_t incarnation) {
  return store->Set(LatestKey(worker), absl::StrCat(incarnation));
}

absl::StatusOr<int64_t> LatestIncarnation(collective::Store* store, int worker,
                                          absl::Duration wait) {
  ASSIGN_OR_RETURN(const std::string v, store->Get(LatestKey(worker), wait));
  int64_t n = -1;
  if (!absl::SimpleAtoi(v, &n) || n < 0) {
    return absl::DataLossError(
        absl::StrCat("ps: worker ", worker, "'s incarnation key holds '", v, "', not a count"));
  }
  return n;
}

absl::StatusOr<std::shared_ptr<gloo::Context>> ConnectLink(collective::Store* store, int worker,
                                                           int64_t incarnation, int ps,
                                                           bool ps_side,
                                                           const collective::GlooOptions& options) {
  collective::PrefixStore link(store, LinkPrefix(worker, incarnation, ps));
  auto context = collective::ConnectGloo(&link, ps_side ? kLinkPs : kLinkWorker, 2, options);
  if (!context.ok()) {
    return common::Annotate(
        context.status(), absl::StrCat("ps: linking worker ", worker, " (incarnation ", incarnation,
                                       ") and PS task ", ps));
  }
  return context;
}

absl::StatusOr<std::vector<std::shared_ptr<gloo::Context>>> ConnectWorkerLinks(
    collective::Store* store, int worker, int64_t incarnation, const ShardMap& map,
    const std::function<collective::GlooOptions(int ps)>& options) {
  RETURN_IF_ERROR(AnnounceIncarnation(store, worker, incarnation));
  std::vector<std::shared_ptr<gloo::Context>> links;
  for (const Shard& s : map.shards) {
    ASSIGN_OR_RETURN(auto c, ConnectLink(store, worker, incarnation, s.ps, false, options(s.ps)));
    links.push_back(std::move(c));
  }
  return links;
}

}  // namespace yoke::ps
