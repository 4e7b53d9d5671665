// pipeline_transport_bench: a pipeline link's round trip, through Yoke's
// shared-memory rings (ShmTransport) and over Gloo's TCP pairs on loopback
// (GlooTransport), between two processes of one host, as co-located stages
// of `yoke up` run.
//
// Stage 0 sends an activation of N floats; stage 1 receives it and sends a
// gradient of N floats back, which stage 0 receives: one round trip, as a
// forward and its backward cross the link with no compute. Each size runs
// `--rounds` rounds, alternating the transports (shm then gloo, then gloo
// then shm), each round timing `--trips` round trips after 10 untimed ones.
// Before timing, every round checks that each message arrives whole: stage
// 1 returns the activation with 1 added to every element, and stage 0
// compares all N values.
//
// Printed per size: the median round trip of each transport (over its
// rounds' medians), the link's rate (2 N x 4 bytes per round trip), and the
// paired ratio gloo/shm per round with its median: above 1, shm is faster.
//
// Usage: pipeline_transport_bench [--sizes 1024,16384,262144,4194304]
//                                 [--rounds 3] [--trips 200]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/file_store.h"
#include "collective/gloo_communicator.h"
#include "pipeline/runtime/gloo_transport.h"
#include "pipeline/runtime/shm_transport.h"

ABSL_FLAG(std::vector<std::string>, sizes,
          std::vector<std::string>({"1024", "16384", "262144", "4194304"}),
          "message sizes in floats");
ABSL_FLAG(int, rounds, 3, "rounds per transport and size (paired, order alternating)");
ABSL_FLAG(int, trips, 200, "timed round trips per round (fewer above 1M floats)");

namespace yoke::pipeline {
namespace {

using engine::Tensor;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// The link's two ends meet through `store`, which must outlive the result.
absl::StatusOr<std::unique_ptr<Transport>> Open(collective::Store* store, bool shm, int stage,
                                                int64_t n) {
  if (shm) {
    ShmTransportOptions o;
    o.activation_ring_bytes = o.gradient_ring_bytes = RingBytesFor(1, n);
    auto t = ShmTransport::Create(store, stage, 2, {true, true}, o, nullptr);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Transport>(std::move(t).value());
  }
  auto t = GlooTransport::Create(store, stage, 2, collective::GlooOptions{}, absl::Seconds(60));
  if (!t.ok()) return t.status();
  return std::unique_ptr<Transport>(std::move(t).value());
}

// One round on `stage`: 10 untimed round trips (the first checked whole),
// then `trips` timed ones; stage 0 returns their median in microseconds.
absl::StatusOr<double> Round(Transport& t, int stage, int64_t n, int trips) {
  Tensor a = Tensor::Zeros({n}), g = Tensor::Zeros({n});
  for (int64_t i = 0; i < n; ++i) a.data<float>()[i] = static_cast<float>(i % 1000) * 0.5f;
  std::vector<double> us;
  for (int trip = 0; trip < 10 + trips; ++trip) {
    const auto start = std::chrono::steady_clock::now();
    if (stage == 0) {
      absl::Status s = t.Send(1, MessageKind::kActivation, trip % 4, a);
      if (s.ok()) s = t.Recv(1, MessageKind::kGradient, trip % 4, &g);
      if (!s.ok()) return s;
      if (trip == 0) {
        for (int64_t i = 0; i < n; ++i) {
          if (g.data<float>()[i] != a.data<float>()[i] + 1.0f) {
            return absl::DataLossError(
                absl::StrCat("element ", i, " of ", n, " came back as ", g.data<float>()[i]));
          }
        }
      }
    } else {
      absl::Status s = t.Recv(0, MessageKind::kActivation, trip % 4, &g);
      if (!s.ok()) return s;
      if (trip == 0) {
        for (int64_t i = 0; i < n; ++i) g.data<float>()[i] += 1.0f;
      }
      s = t.Send(0, MessageKind::kGradient, trip % 4, g);
      if (!s.ok()) return s;
    }
    if (trip >= 10) {
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  return Median(us);
}

int RunStage(const std::string& dir, int stage, std::vector<std::vector<double>>* shm_us,
             std::vector<std::vector<double>>* gloo_us) {
  auto store = collective::FileStore::Open(dir);
  if (!store.ok()) {
    std::fprintf(stderr, "stage %d: %s\n", stage, store.status().ToString().c_str());
    return 1;
  }
  const std::vector<std::string> sizes = absl::GetFlag(FLAGS_sizes);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const int64_t n = std::stoll(sizes[k]);
    const int trips =
        n > (1 << 20) ? std::max(20, absl::GetFlag(FLAGS_trips) / 10) : absl::GetFlag(FLAGS_trips);
    for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
      for (int j = 0; j < 2; ++j) {
        const bool shm = (j == 0) == (round % 2 == 0);
        const std::string name = absl::StrCat(shm ? "shm-" : "gloo-", k, "-", round);
        collective::PrefixStore link(store->get(), name + "/");
        auto t = Open(&link, shm, stage, n);
        if (!t.ok()) {
          std::fprintf(stderr, "stage %d, %s: %s\n", stage, name.c_str(),
                       t.status().ToString().c_str());
          return 1;
        }
        auto us = Round(**t, stage, n, trips);
        if (!us.ok()) {
          std::fprintf(stderr, "stage %d, %s: %s\n", stage, name.c_str(),
                       us.status().ToString().c_str());
          return 1;
        }
        if (stage == 0) (shm ? (*shm_us)[k] : (*gloo_us)[k]).push_back(*us);
      }
    }
  }
  return 0;
}

int Main() {
  char tmpl[] = "/tmp/yoke_transport_bench_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  const std::vector<std::string> sizes = absl::GetFlag(FLAGS_sizes);
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) _exit(RunStage(dir, 1, nullptr, nullptr));
  std::vector<std::vector<double>> shm_us(sizes.size()), gloo_us(sizes.size());
  const int rc = RunStage(dir, 0, &shm_us, &gloo_us);
  int status = 0;
  waitpid(child, &status, 0);
  std::filesystem::remove_all(dir);
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "pipeline_transport_bench: a stage failed\n");
    return 1;
  }
  std::printf("pipeline link round trip, 2 processes, every message checked whole first\n");
  std::printf("%10s %12s %12s %10s %10s %s\n", "floats", "shm us", "gloo us", "shm GB/s",
              "gloo GB/s", "gloo/shm (paired, per round)");
  for (size_t k = 0; k < sizes.size(); ++k) {
    const double n = std::stod(sizes[k]);
    std::vector<double> ratios;
    std::string each;
    for (size_t r = 0; r < shm_us[k].size(); ++r) {
      ratios.push_back(gloo_us[k][r] / shm_us[k][r]);
      absl::StrAppend(&each, r ? " " : "", absl::StrFormat("%.2f", ratios.back()));
    }
    const double s = Median(shm_us[k]), g = Median(gloo_us[k]);
    std::printf("%10.0f %12.1f %12.1f %10.2f %10.2f %.2fx (%s)\n", n, s, g, 2 * n * 4 / (s * 1e3),
                2 * n * 4 / (g * 1e3), Median(ratios), each.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace yoke::pipeline

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return yoke::pipeline::Main();
}
