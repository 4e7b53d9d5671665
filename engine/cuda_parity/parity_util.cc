#include "engine/cuda_parity/parity_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_format.h"
#include "engine/device_backend.h"
#include "engine/rng.h"

namespace yoke::engine::parity {
namespace {

void CheckOk(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "parity: %s failed: %s\n", what, s.ToString().c_str());
  std::abort();
}

}  // namespace

std::string ParityPrecision() {
  const char* v = std::getenv("YOKE_PARITY_PRECISION");
  return v != nullptr && *v != '\0' ? v : "fp32";
}

bool SelfTest() {
  static const bool on = [] {
    const char* v = std::getenv("YOKE_PARITY_SELF_TEST");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

Tensor RandomHost(const Shape& shape, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::Empty(shape);
  common::Philox rng(seed, 1);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = lo + (hi - lo) * rng.NextFloat();
  return t;
}

Tensor RandomLabels(int64_t n, int k, uint64_t seed) {
  Tensor t = Tensor::Empty({n}, DType::kI32);
  common::Philox rng(seed, 2);
  for (int64_t i = 0; i < n; ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng.Uniform(k));
  return t;
}

Tensor ToDevice(const Tensor& host) {
  absl::StatusOr<Tensor> d = Tensor::Allocate(host.shape(), host.dtype(), Gpu(), "a parity input");
  CheckOk(d.status(), "device allocation");
  CheckOk(CopyTensor(*d, host), "copy to the device");
  return *d;
}

Tensor ToHost(const Tensor& device) {
  Tensor h = Tensor::Empty(device.shape(), device.dtype());
  CheckOk(CopyTensor(h, device), "copy to the host");
  return h;
}

Tensor NanDevice(const Shape& shape) {
  Tensor h = Tensor::Empty(shape);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = nan;
  return ToDevice(h);
}

Measure Compare(const Tensor& got, const Tensor& want) {
  Measure m;
  if (got.numel() != want.numel()) {
    m.rel_l2 = m.max_abs = std::numeric_limits<double>::infinity();
    return m;
  }
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  double diff2 = 0, ref2 = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!std::isfinite(g[i])) {
      ++m.nonfinite;
      continue;
    }
    const double d = static_cast<double>(g[i]) - w[i];
    diff2 += d * d;
    ref2 += static_cast<double>(w[i]) * w[i];
    m.max_abs = std::max(m.max_abs, std::fabs(d));
    if (std::memcmp(&g[i], &w[i], sizeof(float)) != 0) ++m.bitwise_diffs;
  }
  m.rel_l2 = std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-30);
  return m;
}

bool Record(const std::string& op, const std::string& check, const Measure& measured,
            double bound) {
  Measure m = measured;
  // Fault injection for the harness's own test (tests/gpu_check_self_test.sh):
  // the op named here differs, so a run must report it.
  if (const char* inject = std::getenv("YOKE_PARITY_INJECT"); inject != nullptr && op == inject) {
    m.rel_l2 += 1.0;
    m.bitwise_diffs += 1;
  }
  const bool pass = m.nonfinite == 0 && (bound == 0 ? m.bitwise_diffs == 0 : m.rel_l2 <= bound);
  std::printf(
      "parity %-28s %-8s rel_l2 %.2e max_abs %.2e nonfinite %lld bitdiff %lld (bound %.0e) %s\n",
      op.c_str(), check.c_str(), m.rel_l2, m.max_abs, static_cast<long long>(m.nonfinite),
      static_cast<long long>(m.bitwise_diffs), bound, pass ? "ok" : "FAIL");
  if (const char* path = std::getenv("YOKE_PARITY_LOG"); path != nullptr && *path != '\0') {
    if (FILE* f = std::fopen(path, "a"); f != nullptr) {
      std::fprintf(f,
                   "{\"op\": \"%s\", \"check\": \"%s\", \"rel_l2\": %.3e, \"max_abs\": %.3e, "
                   "\"nonfinite\": %lld, \"bitwise_diffs\": %lld, \"bound\": %.1e, \"pass\": %s}\n",
                   op.c_str(), check.c_str(), m.rel_l2, m.max_abs,
                   static_cast<long long>(m.nonfinite), static_cast<long long>(m.bitwise_diffs),
                   bound, pass ? "true" : "false");
      std::fclose(f);
    }
  }
  return pass;
}

void Note(const std::string& op, const std::string& check, const Measure& m) {
  std::printf("parity %-28s %-8s rel_l2 %.2e max_abs %.2e (reported, not checked)\n", op.c_str(),
              check.c_str(), m.rel_l2, m.max_abs);
  if (const char* path = std::getenv("YOKE_PARITY_LOG"); path != nullptr && *path != '\0') {
    if (FILE* f = std::fopen(path, "a"); f != nullptr) {
      std::fprintf(f,
                   "{\"op\": \"%s\", \"check\": \"%s\", \"rel_l2\": %.3e, \"max_abs\": %.3e, "
                   "\"info\": true, \"pass\": true}\n",
                   op.c_str(), check.c_str(), m.rel_l2, m.max_abs);
      std::fclose(f);
    }
  }
}

bool RecordCount(const std::string& op, const std::string& check, int64_t value, int64_t max) {
  const bool pass = value <= max;
  std::printf("parity %-28s %-8s count %lld (at most %lld) %s\n", op.c_str(), check.c_str(),
              static_cast<long long>(value), static_cast<long long>(max), pass ? "ok" : "FAIL");
  if (const char* path = std::getenv("YOKE_PARITY_LOG"); path != nullptr && *path != '\0') {
    if (FILE* f = std::fopen(path, "a"); f != nullptr) {
      std::fprintf(f,
                   "{\"op\": \"%s\", \"check\": \"%s\", \"count\": %lld, \"max\": %lld, "
                   "\"pass\": %s}\n",
                   op.c_str(), check.c_str(), static_cast<long long>(value),
                   static_cast<long long>(max), pass ? "true" : "false");
      std::fclose(f);
    }
  }
  return pass;
}

}  // namespace yoke::engine::parity
