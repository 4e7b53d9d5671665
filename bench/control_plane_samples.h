// Latency samples and their percentile line, shared by control_plane_bench's
// runs (bench/control_plane_bench.cc, bench/control_plane_list.cc).
#ifndef YOKE_BENCH_CONTROL_PLANE_SAMPLES_H_
#define YOKE_BENCH_CONTROL_PLANE_SAMPLES_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace yoke::bench {

// Latency samples in microseconds.
struct Samples {
  std::mutex mu;
  std::vector<double> us;
  std::atomic<int64_t> errors{0};
  void Add(double v) {
    std::lock_guard<std::mutex> l(mu);
    us.push_back(v);
  }
  void AddAll(const std::vector<double>& v) {
    std::lock_guard<std::mutex> l(mu);
    us.insert(us.end(), v.begin(), v.end());
  }
};

// "name n=... p50=... p99=... max=... errors=..." (milliseconds).
inline std::string Report(const std::string& name, Samples& s) {
  std::lock_guard<std::mutex> l(s.mu);
  std::vector<double>& v = s.us;
  if (v.empty()) return absl::StrCat(name, ": no samples\n");
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {
    return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))] / 1000;
  };
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%-12s n=%-7zu p50=%7.2f ms  p99=%7.2f ms  max=%7.2f ms  errors=%lld\n",
                name.c_str(), v.size(), pct(0.50), pct(0.99), v.back() / 1000,
                static_cast<long long>(s.errors.load()));
  return buf;
}

inline double Micros(absl::Time start) { return absl::ToDoubleMicroseconds(absl::Now() - start); }

}  // namespace yoke::bench

#endif  // YOKE_BENCH_CONTROL_PLANE_SAMPLES_H_
