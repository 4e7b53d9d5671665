// ps_straggler_bench: parameter-server jobs with transient stragglers, sync
// against bounded staleness and async, in one run (issue 34's goal: bounded
// s = 3 at >= 1.5x the samples/s of sync).
//
// The job is configs/fashion_mnist_cnn.yaml with W workers and P PS tasks;
// the workers' trainers run as threads of this process over an in-memory
// rendezvous (as tests do), each replica on one thread. A straggler is
// TrainerOptions::straggler_probability: each step, each worker with
// probability p sleeps until its step has taken `factor` x its compute time
// (a pure function of seed, rank and step, so every mode sees the same
// stragglers). Every run is checked before its time counts: each worker ran
// every step, and the model learned (test accuracy on 2,000 images above
// --min_accuracy). A run's time is the slowest worker's training time;
// samples/s is steps x batch over it. Each seed runs every mode back to back,
// and the paired ratios against sync (the peer) are printed with their
// medians.
//
// Usage: ps_straggler_bench [--workers 4] [--ps 2] [--staleness 3]
//   [--probability 0.1] [--factor 3] [--steps 150] [--seeds 3]
//   [--modes sync,bounded,async] [--config configs/fashion_mnist_cnn.yaml]
//   [--set field=value,...]
// The accuracy goal (bounded within 1 point of sync over whole epochs) is
// the same bench without stragglers: --probability 0 --steps 938 (one epoch
// of batch 64) --modes sync,bounded --set data.test.num_examples=10000.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "collective/store.h"
#include "config/config.h"
#include "jobspec/ps_check.h"
#include "trainer/trainer.h"

ABSL_FLAG(int, workers, 4, "workers (one replica each)");
ABSL_FLAG(int, ps, 2, "PS tasks");
ABSL_FLAG(int, staleness, 3, "bounded: max_staleness");
ABSL_FLAG(double, probability, 0.1, "each step, each worker straggles with this probability");
ABSL_FLAG(double, factor, 3, "a straggler's step takes this many times its compute time");
ABSL_FLAG(int, steps, 150, "training steps per run");
ABSL_FLAG(int, seeds, 3, "runs per mode (seeds 1..N)");
ABSL_FLAG(double, min_accuracy, 0.3,
          "a run whose model tests below this fails the bench (chance is 0.1)");
ABSL_FLAG(std::string, config, "configs/fashion_mnist_cnn.yaml", "the job");
ABSL_FLAG(std::vector<std::string>, modes, std::vector<std::string>({"sync", "bounded", "async"}),
          "consistencies to run, sync first (the peer); 'sync-after' is sync with every shard "
          "pushed after backward, not during it (the overlap's peer)");
ABSL_FLAG(std::vector<std::string>, set, {},
          "more overrides of the job, comma-separated (training.optimizer.momentum=0,...)");

namespace yoke::worker {
namespace {

struct Run {
  double samples_per_second = 0;
  double accuracy = 0;
};

absl::StatusOr<Run> RunJob(const std::string& mode, int seed) {
  const int workers = absl::GetFlag(FLAGS_workers), ps = absl::GetFlag(FLAGS_ps);
  const int steps = absl::GetFlag(FLAGS_steps);
  std::vector<std::string> overrides = {
      absl::StrCat("distribution.workers=", workers),
      "distribution.strategy=parameter_server",
      absl::StrCat("distribution.parameter_servers=", ps),
      "distribution.consistency=" + (mode == "sync-after" ? std::string("sync") : mode),
      absl::StrCat("distribution.max_staleness=",
                   mode == "bounded" ? absl::GetFlag(FLAGS_staleness) : 0),
      absl::StrCat("training.max_steps=", steps),
      absl::StrCat("training.seed=", seed),
      "training.threads=1",
      "data.test.num_examples=2000",
      "training.log_every_steps=1000"};
  for (const std::string& o : absl::GetFlag(FLAGS_set)) overrides.push_back(o);
  auto spec = common::LoadJobSpecFile(absl::GetFlag(FLAGS_config), overrides);
  if (!spec.ok()) return spec.status();
  collective::InMemoryStore store;
  const std::vector<common::PsShare> shares = common::PsShares(workers, 1, ps);
  std::vector<absl::StatusOr<v1::TrainResult>> results(workers, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&, i] {
      TrainerOptions o;
      o.world_size = workers + ps;
      o.first_rank = shares[i].first_rank;
      o.num_replicas = shares[i].num_ranks;
      o.store = &store;
      o.collective_timeout = absl::Seconds(120);
      o.straggler_probability = absl::GetFlag(FLAGS_probability);
      o.straggler_factor = absl::GetFlag(FLAGS_factor);
      o.ps_push_after_backward = mode == "sync-after";
      auto t = Trainer::Create(*spec, o);
      if (!t.ok()) {
        results[i] = t.status();
        return;
      }
      results[i] = (*t)->Run();
      if (results[i].ok() && results[i]->steps() != steps) {
        results[i] = absl::InternalError(
            absl::StrCat("worker ", i, " ran ", results[i]->steps(), " of ", steps, " steps"));
      }
    });
  }
  for (auto& t : threads) t.join();
  double slowest = 0;
  for (const auto& r : results) {
    if (!r.ok()) return r.status();
    slowest = std::max(slowest, r->train_seconds());
  }
  Run run;
  run.accuracy = results[0]->test_accuracy();
  if (run.accuracy < absl::GetFlag(FLAGS_min_accuracy)) {
    return absl::InternalError(absl::StrCat(mode, " seed ", seed, ": test accuracy ", run.accuracy,
                                            " is below --min_accuracy"));
  }
  run.samples_per_second = static_cast<double>(steps) * spec->training().batch_size() / slowest;
  return run;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int Main() {
  const std::vector<std::string> modes = absl::GetFlag(FLAGS_modes);
  if (modes.empty() || (modes[0] != "sync" && modes[0] != "sync-after")) {
    std::fprintf(stderr, "--modes must start with sync, the peer\n");
    return 2;
  }
  std::map<std::string, std::vector<double>> speed, ratio, accuracy;
  std::printf("%d workers + %d PS tasks, %d steps, stragglers p=%.2f at %.1fx, bounded s=%d\n",
              absl::GetFlag(FLAGS_workers), absl::GetFlag(FLAGS_ps), absl::GetFlag(FLAGS_steps),
              absl::GetFlag(FLAGS_probability), absl::GetFlag(FLAGS_factor),
              absl::GetFlag(FLAGS_staleness));
  for (int seed = 1; seed <= absl::GetFlag(FLAGS_seeds); ++seed) {
    std::map<std::string, Run> runs;
    for (const std::string& mode : modes) {
      absl::StatusOr<Run> r = RunJob(mode, seed);
      if (!r.ok()) {
        std::fprintf(stderr, "FAILED %s seed %d: %s\n", mode.c_str(), seed,
                     r.status().ToString().c_str());
        return 1;
      }
      runs[mode] = *r;
      speed[mode].push_back(r->samples_per_second);
      accuracy[mode].push_back(r->accuracy);
      ratio[mode].push_back(r->samples_per_second / runs[modes[0]].samples_per_second);
    }
    std::printf("seed %d:", seed);
    for (const std::string& mode : modes) {
      std::printf("  %s %.0f samples/s (%.2fx %s, accuracy %.4f)", mode.c_str(),
                  runs[mode].samples_per_second, ratio[mode].back(), modes[0].c_str(),
                  runs[mode].accuracy);
    }
    std::printf("\n");
  }
  std::printf("median:");
  // Mean accuracies too: the accuracy goal is on the mean of the seeds.
  for (const std::string& mode : modes) {
    double mean = 0;
    for (double a : accuracy[mode]) mean += a / static_cast<double>(accuracy[mode].size());
    std::printf("  %s %.0f samples/s, paired ratio vs %s %.2fx, accuracy %.4f (mean %.4f)",
                mode.c_str(), Median(speed[mode]), modes[0].c_str(), Median(ratio[mode]),
                Median(accuracy[mode]), mean);
  }
  std::printf("\n");
  return 0;
}

}  // namespace
}  // namespace yoke::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return yoke::worker::Main();
}
