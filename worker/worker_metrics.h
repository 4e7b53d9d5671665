// The worker's Prometheus metrics: what its trainers report at every log
// step (v1::StepProgress), one series set per running trainer, labelled
// job, rank (the trainer's first rank) and role ("worker": a data-parallel
// rank). A parameter-server job's trainer adds its replica's PS pushes and
// waits (role "worker") and, when it runs PS tasks, their update rate and
// queue (role "ps"). docs/observability.md lists them.
//
// Gauges are the means per step over the trainer's last log window; the
// step histogram counts every step. A trainer's series are removed
// `expire_after` after its attempt ends, so finished jobs do not pile up
// (a scrape in between still sees the last values).
//
// Thread-safety: every method may be called from any thread.
#ifndef YOKE_WORKER_WORKER_METRICS_H_
#define YOKE_WORKER_WORKER_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/yoke/v1/metrics.pb.h"

namespace prometheus {
class Registry;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace yoke::worker {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(absl::Duration expire_after = absl::Minutes(1));
  ~WorkerMetrics();

  // The trainer of `job` whose first rank is `rank` logged `p`.
  void OnStep(const std::string& job, int rank, const v1::StepProgress& p);
  // Its attempt ended: the series expire after expire_after.
  void OnEnd(const std::string& job, int rank);

  // The text exposition; drops expired series first.
  std::string Exposition();

  // Series currently exported for `job` (for tests and the series bound).
  int SeriesOf(const std::string& job);

 private:
  struct Series {
    prometheus::Histogram* step_seconds;
    prometheus::Gauge* samples_per_second;
    prometheus::Gauge* data_wait;
    prometheus::Gauge* allreduce;
    prometheus::Gauge* allreduce_exposed;
    prometheus::Gauge* loss;
    prometheus::Gauge* epoch;
    // A PS job's, made at its first report; null otherwise.
    prometheus::Gauge* ps_pushes = nullptr;
    prometheus::Gauge* ps_wait = nullptr;
    prometheus::Gauge* ps_updates = nullptr;
    prometheus::Gauge* ps_queue = nullptr;
    absl::Time ended = absl::InfiniteFuture();
  };
  void SetPs(const std::string& job, int rank, const v1::StepProgress& p, Series& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Remove(Series& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration expire_after_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>* step_seconds_;
  prometheus::Family<prometheus::Gauge>* samples_per_second_;
  prometheus::Family<prometheus::Gauge>* data_wait_;
  prometheus::Family<prometheus::Gauge>* allreduce_;
  prometheus::Family<prometheus::Gauge>* allreduce_exposed_;
  prometheus::Family<prometheus::Gauge>* loss_;
  prometheus::Family<prometheus::Gauge>* epoch_;
  prometheus::Family<prometheus::Gauge>* ps_pushes_;
  prometheus::Family<prometheus::Gauge>* ps_wait_;
  prometheus::Family<prometheus::Gauge>* ps_updates_;
  prometheus::Family<prometheus::Gauge>* ps_queue_;

  absl::Mutex mu_;
  std::map<std::pair<std::string, int>, Series> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace yoke::worker

#endif  // YOKE_WORKER_WORKER_METRICS_H_
