#include "bench/control_plane_list.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "bench/control_plane_samples.h"
#include "grpcpp/grpcpp.h"

namespace yoke::bench {
namespace {

// Follows every page as the CLI does (1,000 a page); the jobs listed go into
// `jobs` (when set). False on an RPC error or a page token that repeats.
bool Walk(v1::Coordinator::Stub* client, bool summary, std::vector<v1::Job>* jobs) {
  std::string token;
  for (int page = 0; page < 100000; ++page) {
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(1000);
    req.set_page_token(token);
    req.set_summary(summary);
    v1::ListJobsResponse resp;
    if (!client->ListJobs(&ctx, req, &resp).ok()) return false;
    if (jobs != nullptr) {
      for (v1::Job& j : *resp.mutable_jobs()) jobs->push_back(std::move(j));
    }
    if (resp.next_page_token().empty()) return true;
    if (resp.next_page_token() == token) return false;
    token = resp.next_page_token();
  }
  return false;
}

bool Submit(v1::Coordinator::Stub* client, const v1::JobSpec& spec, int jobs,
            std::vector<std::string>* ids) {
  constexpr int kThreads = 4;
  std::vector<std::vector<std::string>> per_thread(kThreads);
  std::atomic<int> next{0}, failed{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      while (next.fetch_add(1) < jobs) {
        grpc::ClientContext ctx;
        v1::SubmitJobRequest req;
        *req.mutable_spec() = spec;
        v1::SubmitJobResponse resp;
        if (client->SubmitJob(&ctx, req, &resp).ok()) {
          per_thread[t].push_back(resp.job_id());
        } else {
          ++failed;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& v : per_thread) ids->insert(ids->end(), v.begin(), v.end());
  if (failed > 0)
    std::fprintf(stderr, "control_plane_bench: %d submissions failed\n", failed.load());
  return failed == 0;
}

// The check before timing: both walks list exactly the submitted jobs,
// newest first; a summary's spec is its name alone, a whole one is the spec.
bool Check(v1::Coordinator::Stub* client, const v1::JobSpec& spec,
           const std::vector<std::string>& ids) {
  const std::set<std::string> want(ids.begin(), ids.end());
  v1::JobSpec name_only;
  name_only.set_name(spec.name());
  for (bool summary : {true, false}) {
    std::vector<v1::Job> listed;
    if (!Walk(client, summary, &listed)) return false;
    std::set<std::string> got;
    bool ordered = true, specs = true;
    for (size_t i = 0; i < listed.size(); ++i) {
      got.insert(listed[i].id());
      ordered &= i == 0 || listed[i - 1].id() > listed[i].id();
      specs &=
          listed[i].spec().SerializeAsString() == (summary ? name_only : spec).SerializeAsString();
    }
    if (listed.size() != ids.size() || got != want || !ordered || !specs) {
      std::fprintf(stderr,
                   "control_plane_bench: a %s walk listed %zu jobs (%zu submitted), %s, %s\n",
                   summary ? "summary" : "whole", listed.size(), ids.size(),
                   got == want && ordered ? "the same ids newest first" : "NOT the submitted ids",
                   specs ? "specs as expected" : "WRONG specs");
      return false;
    }
  }
  return true;
}

}  // namespace

int ListJobsBench(v1::Coordinator::Stub* client, const v1::JobSpec& spec, int jobs, int rounds) {
  std::vector<std::string> ids;
  const absl::Time t0 = absl::Now();
  if (!Submit(client, spec, jobs, &ids)) return 1;
  std::printf("submitted %d jobs of %zu spec bytes in %.1f s\n", jobs, spec.ByteSizeLong(),
              absl::ToDoubleSeconds(absl::Now() - t0));
  if (!Check(client, spec, ids)) return 1;
  std::printf("check: both walks list the %zu submitted jobs, newest first\n", ids.size());
  Samples summary, whole, page;
  for (int r = 0; r < rounds; ++r) {
    absl::Time start = absl::Now();
    if (!Walk(client, true, nullptr)) ++summary.errors;
    summary.Add(Micros(start));
    start = absl::Now();
    if (!Walk(client, false, nullptr)) ++whole.errors;
    whole.Add(Micros(start));
    grpc::ClientContext ctx;
    v1::ListJobsRequest req;
    req.set_page_size(100);
    req.set_summary(true);
    v1::ListJobsResponse resp;
    start = absl::Now();
    if (!client->ListJobs(&ctx, req, &resp).ok() || resp.jobs_size() != std::min(jobs, 100)) {
      ++page.errors;
    }
    page.Add(Micros(start));
  }
  std::printf("%s%s%s", Report("walk summary", summary).c_str(),
              Report("walk whole", whole).c_str(), Report("page 100", page).c_str());
  std::lock_guard<std::mutex> l(summary.mu);
  const double p99 =
      summary.us[std::min(summary.us.size() - 1, static_cast<size_t>(0.99 * summary.us.size()))];
  std::printf("goal: a whole `yoke jobs` walk p99 < 1 s: %s\n", p99 < 1e6 ? "met" : "MISSED");
  return summary.errors + whole.errors + page.errors > 0 ? 1 : 0;
}

}  // namespace yoke::bench
