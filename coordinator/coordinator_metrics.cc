#include "coordinator/coordinator_metrics.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "jobspec/job_state.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace yoke::server {
namespace {

// Seconds from submit to running (or failure to the next step): from a
// fraction of a second on an idle cluster to an hour in a queue.
const prometheus::Histogram::BucketBoundaries kWaitBuckets = {0.1, 0.25, 0.5, 1,   2.5, 5,
                                                              10,  30,   60,  300, 900, 3600};
// gRPC handler latency: 100 us to 10 s (WatchJob and log streams are long
// by design and are measured like the rest).
const prometheus::Histogram::BucketBoundaries kRpcBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 10};

std::string StateLabel(v1::JobState s) {
  std::string name = v1::JobState_Name(s);
  if (name.rfind("JOB_", 0) == 0) name = name.substr(4);
  return absl::AsciiStrToLower(name);
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  jobs_ = &prometheus::BuildGauge()
               .Name("yoke_jobs")
               .Help("Jobs in the store, by state.")
               .Register(*registry_);
  submissions_ = &prometheus::BuildCounter()
                      .Name("yoke_job_submissions_total")
                      .Help("Jobs accepted by SubmitJob since the coordinator started.")
                      .Register(*registry_)
                      .Add({});
  scheduling_ = &prometheus::BuildHistogram()
                     .Name("yoke_scheduling_latency_seconds")
                     .Help("From a job's submission to its first attempt running.")
                     .Register(*registry_)
                     .Add({}, kWaitBuckets);
  workers_ = &prometheus::BuildGauge()
                  .Name("yoke_workers")
                  .Help("Registered workers, by state.")
                  .Register(*registry_);
  rpc_ = &prometheus::BuildHistogram()
              .Name("yoke_rpc_latency_seconds")
              .Help("gRPC handler time, by method.")
              .Register(*registry_);
  restarts_ = &prometheus::BuildCounter()
                   .Name("yoke_restarts_total")
                   .Help("Failed attempts retried (spec.restart.max_restarts).")
                   .Register(*registry_)
                   .Add({});
  recovery_ = &prometheus::BuildHistogram()
                   .Name("yoke_recovery_seconds")
                   .Help("From an attempt's failure to the first step of the next one.")
                   .Register(*registry_)
                   .Add({}, kWaitBuckets);
  goodput_ = &prometheus::BuildGauge()
                  .Name("yoke_goodput_ratio")
                  .Help(
                      "Time in committed steps over wall time since the job started, restarts "
                      "included (running jobs).")
                  .Register(*registry_);
}

CoordinatorMetrics::~CoordinatorMetrics() = default;

void CoordinatorMetrics::OnSubmit() { submissions_->Increment(); }
void CoordinatorMetrics::OnScheduled(double seconds) { scheduling_->Observe(seconds); }
void CoordinatorMetrics::OnRestart() { restarts_->Increment(); }
void CoordinatorMetrics::OnRecovered(double seconds) { recovery_->Observe(seconds); }

void CoordinatorMetrics::OnRpc(const std::string& method, double seconds) {
  prometheus::Histogram* h;
  {
    absl::MutexLock lock(&mu_);
    auto it = rpc_by_method_.find(method);
    if (it == rpc_by_method_.end()) {
      it = rpc_by_method_.emplace(method, &rpc_->Add({{"method", method}}, kRpcBuckets)).first;
    }
    h = it->second;
  }
  h->Observe(seconds);
}

double Goodput(const v1::Job& job, int64_t now_ms) {
  if (job.attempts_size() == 0 || job.attempts(0).start_time_ms() <= 0) return 0;
  const v1::StepProgress& p = job.progress();
  if (p.window_steps() <= 0) return 0;
  const double wall = (now_ms - job.attempts(0).start_time_ms()) / 1e3;
  if (wall <= 0) return 0;
  const double committed = static_cast<double>(p.step()) * p.step_seconds() / p.window_steps();
  return std::clamp(committed / wall, 0.0, 1.0);
}

std::string CoordinatorMetrics::Exposition(const CoordinatorView& view) {
  absl::MutexLock lock(&mu_);
  // Jobs: every state present, 0 where none, so a query never misses one.
  std::map<v1::JobState, int64_t> counts;
  if (view.job_counts) {
    auto c = view.job_counts();
    if (c.ok()) counts = *std::move(c);
  }
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (!v1::JobState_IsValid(s) || s == v1::JOB_STATE_UNSPECIFIED) continue;
    const auto state = static_cast<v1::JobState>(s);
    jobs_->Add({{"state", StateLabel(state)}}).Set(static_cast<double>(counts[state]));
  }
  // Workers: idle, busy (running an attempt) or lost.
  std::map<std::string, int> by_state = {{"idle", 0}, {"busy", 0}, {"lost", 0}};
  if (view.workers) {
    for (const v1::Worker& w : view.workers()) {
      ++by_state[!w.alive() ? "lost" : w.running().empty() ? "idle" : "busy"];
    }
  }
  for (const auto& [state, n] : by_state) workers_->Add({{"state", state}}).Set(n);
  // Goodput: one series per running job; the others are removed.
  for (prometheus::Gauge* g : goodput_series_) goodput_->Remove(g);
  goodput_series_.clear();
  if (view.running_jobs && view.now_ms) {
    const int64_t now = view.now_ms();
    for (const v1::Job& j : view.running_jobs()) {
      prometheus::Gauge* g = &goodput_->Add({{"job", j.id()}});
      g->Set(Goodput(j, now));
      goodput_series_.push_back(g);
    }
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace yoke::server
