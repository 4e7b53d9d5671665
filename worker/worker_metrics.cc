#include "worker/worker_metrics.h"

#include <vector>

#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "telemetry/train_metrics.h"

namespace yoke::worker {
namespace {

template <typename Builder>
auto& Family(Builder b, const char* name, const char* help, prometheus::Registry& r) {
  return b.Name(name).Help(help).Register(r);
}

}  // namespace

WorkerMetrics::WorkerMetrics(absl::Duration expire_after)
    : expire_after_(expire_after), registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  step_seconds_ = &Family(prometheus::BuildHistogram(), "yoke_step_seconds",
                          "Training step time (data, forward, backward, allreduce, optimizer).", r);
  samples_per_second_ =
      &Family(prometheus::BuildGauge(), "yoke_samples_per_second",
              "Training throughput of the whole job, over the last log window.", r);
  data_wait_ = &Family(prometheus::BuildGauge(), "yoke_data_wait_seconds",
                       "Mean time per step waiting for the input pipeline (last log window).", r);
  allreduce_ =
      &Family(prometheus::BuildGauge(), "yoke_allreduce_seconds",
              "Mean gradient allreduce time per step, hidden or not (last log window).", r);
  allreduce_exposed_ =
      &Family(prometheus::BuildGauge(), "yoke_allreduce_exposed_seconds",
              "Mean time per step waiting for the allreduce after backward (last log window).", r);
  loss_ = &Family(prometheus::BuildGauge(), "yoke_train_loss",
                  "Mean training loss over the last log window.", r);
  epoch_ = &Family(prometheus::BuildGauge(), "yoke_epoch",
                   "Epoch in progress, 1-based, with the fraction done.", r);
  ps_pushes_ = &Family(prometheus::BuildGauge(), "yoke_ps_pushes",
                       "Parameter-server job: steps the replica pushed this attempt.", r);
  ps_wait_ = &Family(prometheus::BuildGauge(), "yoke_ps_wait_seconds",
                     "Parameter-server job: mean time per step waiting for the PS tasks' "
                     "answers, staleness holds included (last log window).",
                     r);
  ps_updates_ = &Family(prometheus::BuildGauge(), "yoke_ps_updates_per_second",
                        "Parameter-server job: updates per second the trainer's PS tasks "
                        "applied to their shards (last log window).",
                        r);
  ps_queue_ = &Family(prometheus::BuildGauge(), "yoke_ps_queue_depth",
                      "Parameter-server job: pushes waiting at the trainer's PS tasks for "
                      "their step's update.",
                      r);
}

void WorkerMetrics::SetPs(const std::string& job, int rank, const v1::StepProgress& p, Series& s) {
  const v1::PsWindow& w = p.ps();
  if (s.ps_pushes == nullptr) {
    const prometheus::Labels labels = {
        {"job", job}, {"rank", std::to_string(rank)}, {"role", "worker"}};
    s.ps_pushes = &ps_pushes_->Add(labels);
    s.ps_wait = &ps_wait_->Add(labels);
  }
  if (s.ps_updates == nullptr && w.ps_tasks() > 0) {
    const prometheus::Labels labels = {
        {"job", job}, {"rank", std::to_string(rank)}, {"role", "ps"}};
    s.ps_updates = &ps_updates_->Add(labels);
    s.ps_queue = &ps_queue_->Add(labels);
  }
  s.ps_pushes->Set(static_cast<double>(w.pushes()));
  if (p.window_steps() > 0)
    s.ps_wait->Set(w.wait_seconds() / static_cast<double>(p.window_steps()));
  if (s.ps_updates != nullptr) {
    s.ps_updates->Set(w.updates_per_second());
    s.ps_queue->Set(static_cast<double>(w.queue_depth()));
  }
}

WorkerMetrics::~WorkerMetrics() = default;

void WorkerMetrics::OnStep(const std::string& job, int rank, const v1::StepProgress& p) {
  absl::MutexLock lock(&mu_);
  auto key = std::make_pair(job, rank);
  auto it = series_.find(key);
  if (it == series_.end()) {
    const prometheus::Labels labels = {
        {"job", job}, {"rank", std::to_string(rank)}, {"role", "worker"}};
    prometheus::Histogram::BucketBoundaries bounds(common::kStepSecondsBuckets.begin(),
                                                   common::kStepSecondsBuckets.end());
    Series s{&step_seconds_->Add(labels, bounds),
             &samples_per_second_->Add(labels),
             &data_wait_->Add(labels),
             &allreduce_->Add(labels),
             &allreduce_exposed_->Add(labels),
             &loss_->Add(labels),
             &epoch_->Add(labels)};
    it = series_.emplace(key, s).first;
  }
  Series& s = it->second;
  s.ended = absl::InfiniteFuture();  // a new attempt of the same job and rank
  const int n_buckets = static_cast<int>(common::kStepSecondsBuckets.size()) + 1;
  if (p.window_steps() > 0 && p.step_seconds_histogram_size() == n_buckets) {
    std::vector<double> counts(p.step_seconds_histogram().begin(),
                               p.step_seconds_histogram().end());
    s.step_seconds->ObserveMultiple(counts, p.step_seconds());
    const double n = static_cast<double>(p.window_steps());
    s.data_wait->Set(p.data_wait_seconds() / n);
    s.allreduce->Set(p.allreduce_seconds() / n);
    s.allreduce_exposed->Set(p.allreduce_exposed_seconds() / n);
  }
  s.samples_per_second->Set(p.samples_per_second());
  s.loss->Set(p.loss());
  const double frac =
      p.steps_per_epoch() > 0 ? static_cast<double>(p.step_in_epoch()) / p.steps_per_epoch() : 0.0;
  s.epoch->Set(static_cast<double>(p.epoch()) + 1.0 + (frac < 1.0 ? frac : 0.0));
  if (p.has_ps()) SetPs(job, rank, p, s);
}

void WorkerMetrics::OnEnd(const std::string& job, int rank) {
  absl::MutexLock lock(&mu_);
  auto it = series_.find({job, rank});
  if (it != series_.end() && it->second.ended == absl::InfiniteFuture()) {
    it->second.ended = absl::Now();
  }
}

void WorkerMetrics::Remove(Series& s) {
  step_seconds_->Remove(s.step_seconds);
  samples_per_second_->Remove(s.samples_per_second);
  data_wait_->Remove(s.data_wait);
  allreduce_->Remove(s.allreduce);
  allreduce_exposed_->Remove(s.allreduce_exposed);
  loss_->Remove(s.loss);
  epoch_->Remove(s.epoch);
  if (s.ps_pushes != nullptr) {
    ps_pushes_->Remove(s.ps_pushes);
    ps_wait_->Remove(s.ps_wait);
  }
  if (s.ps_updates != nullptr) {
    ps_updates_->Remove(s.ps_updates);
    ps_queue_->Remove(s.ps_queue);
  }
}

std::string WorkerMetrics::Exposition() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (auto it = series_.begin(); it != series_.end();) {
    if (it->second.ended != absl::InfiniteFuture() && now - it->second.ended >= expire_after_) {
      Remove(it->second);
      it = series_.erase(it);
    } else {
      ++it;
    }
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

int WorkerMetrics::SeriesOf(const std::string& job) {
  int n = 0;
  const std::string needle = "job=\"" + job + "\"";
  const std::string text = Exposition();
  for (size_t pos = 0; (pos = text.find(needle, pos)) != std::string::npos; pos += needle.size()) {
    ++n;
  }
  return n;
}

}  // namespace yoke::worker
