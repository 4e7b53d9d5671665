// Helpers for tests that compare Trainer runs: a run's parameters, a plain
// one-replica run, the relative difference of two parameter vectors, and the
// trainers of one data-parallel job on threads over a shared store (as
// separate processes would run them). Header-only; tests only.
#ifndef YOKE_TRAINER_TESTING_TRAINER_RUNS_H_
#define YOKE_TRAINER_TESTING_TRAINER_RUNS_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collective/store.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/job.pb.h"
#include "proto/yoke/v1/metrics.pb.h"
#include "trainer/trainer.h"

namespace yoke::worker::testing {

// Local replica `replica`'s parameters, flattened.
inline std::vector<float> Params(Trainer& t, int replica = 0) {
  const engine::Tensor& v = t.model(replica).params().flat_values();
  return std::vector<float>(v.data<float>(), v.data<float>() + v.numel());
}

// One replica, the plain (communicator-free) path; its final parameters.
inline std::vector<float> TrainAlone(const v1::JobSpec& spec) {
  auto t = Trainer::Create(spec, TrainerOptions());
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  auto r = (*t)->Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return Params(**t);
}

// max |a - b| / max |b|: the difference relative to the weights' scale.
inline double RelMaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size() && i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - b[i]));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return a.size() == b.size() ? diff / scale : INFINITY;
}

// One Trainer of a data-parallel job (a worker's share of its ranks).
struct Worker {
  v1::JobSpec spec;
  TrainerOptions options;
  std::unique_ptr<Trainer> trainer;
  absl::Status status;
  v1::TrainResult result;  // when status is OK
  int64_t steps = 0;       // global steps done
};

// `workers` trainers of `replicas` consecutive local replicas each, over
// `store` (which must outlive them: their communicators use it until they are
// destroyed). Each may be changed before RunWorkers.
inline std::vector<Worker> MakeWorkers(const v1::JobSpec& spec, int workers, int replicas,
                                       collective::Store* store) {
  std::vector<Worker> out(workers);
  for (int i = 0; i < workers; ++i) {
    out[i].spec = spec;
    out[i].options.world_size = workers * replicas;
    out[i].options.first_rank = i * replicas;
    out[i].options.num_replicas = replicas;
    out[i].options.store = store;
    out[i].options.collective_timeout = absl::Seconds(60);
  }
  return out;
}

// Runs one worker's Trainer to its end on this thread.
inline void RunOne(Worker& w) {
  auto t = Trainer::Create(w.spec, w.options);
  if (!t.ok()) {
    w.status = t.status();
    return;
  }
  w.trainer = *std::move(t);
  auto r = w.trainer->Run();
  w.status = r.status();
  if (r.ok()) w.result = *r;
  w.steps = w.trainer->global_step();
}

// Runs each worker's Trainer on its own thread and waits for all.
inline void RunWorkers(std::vector<Worker>& workers) {
  std::vector<std::thread> threads;
  for (Worker& w : workers) threads.emplace_back([&w] { RunOne(w); });
  for (auto& t : threads) t.join();
}

}  // namespace yoke::worker::testing

#endif  // YOKE_TRAINER_TESTING_TRAINER_RUNS_H_
