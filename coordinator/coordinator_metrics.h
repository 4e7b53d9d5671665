// The coordinator's Prometheus metrics (docs/observability.md lists them all).
//
// Events are counted where they happen (the Coordinator and the gRPC
// services call the On* methods); states are read when Prometheus scrapes:
// Exposition() asks for the job counts, the workers and the running jobs
// through the callbacks it is given, so a gauge is never stale.
//
// Labels are only `job`, `rank` and `role`, and the per-job series (goodput)
// exist only while the job runs, so a finished job's series expire at the
// next scrape.
//
// Thread-safety: every method may be called from any thread.
#ifndef YOKE_COORDINATOR_COORDINATOR_METRICS_H_
#define YOKE_COORDINATOR_COORDINATOR_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/yoke/v1/coordinator.pb.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace yoke::server {

// What the coordinator reads at scrape time.
struct CoordinatorView {
  std::function<absl::StatusOr<std::map<v1::JobState, int64_t>>()> job_counts;
  std::function<std::vector<v1::Worker>()> workers;
  std::function<std::vector<v1::Job>()> running_jobs;
  std::function<int64_t()> now_ms;
};

class CoordinatorMetrics {
 public:
  CoordinatorMetrics();
  ~CoordinatorMetrics();

  void OnSubmit();
  // A job's first attempt reached RUNNING, `seconds` after it was submitted.
  void OnScheduled(double seconds);
  // A failed attempt is retried.
  void OnRestart();
  // The first step of a retried attempt, `seconds` after the failure.
  void OnRecovered(double seconds);
  // One gRPC call of `method` took `seconds`.
  void OnRpc(const std::string& method, double seconds);

  // The Prometheus text exposition (format 0.0.4) of every metric, with the
  // state gauges refreshed from `view`.
  std::string Exposition(const CoordinatorView& view);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>* jobs_;
  prometheus::Counter* submissions_;
  prometheus::Histogram* scheduling_;
  prometheus::Family<prometheus::Gauge>* workers_;
  prometheus::Family<prometheus::Histogram>* rpc_;
  prometheus::Counter* restarts_;
  prometheus::Histogram* recovery_;
  prometheus::Family<prometheus::Gauge>* goodput_;

  absl::Mutex mu_;  // serializes scrapes (they add and remove series)
  std::map<std::string, prometheus::Histogram*> rpc_by_method_ ABSL_GUARDED_BY(mu_);
  std::vector<prometheus::Gauge*> goodput_series_ ABSL_GUARDED_BY(mu_);
};

// The goodput of a running job at `now_ms`: time in committed steps (its
// global step count times the mean step time of its last report) over the
// wall time since its first attempt started, restarts and their lost steps
// included. 0 when it has not started or reported.
double Goodput(const v1::Job& job, int64_t now_ms);

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_COORDINATOR_METRICS_H_
