// CNN step benchmark: where the Fashion-MNIST CNN's training step goes.
//
//   cnn_step_bench [--batch_size 64] [--iters 30] [--warmup 5]
//
// Times, on Fashion-MNIST-sized input (28, 28, 1) and random data:
//   - each of the zoo CNN's two convolutions alone (5x5, "same", 1->32 on
//     28x28 and 32->64 on 14x14; forward + backward, dL/dx only where the
//     model needs it);
//   - the whole model's training step (forward, loss, backward, SGD with
//     momentum) as the trainer runs it;
//   - oneDNN's sgemm on square matrices, whose best rate is the compute
//     limit the step is measured against (with its step FLOPs);
//   - the step broken down by layer (forward and backward), loss, optimizer.
// Before timing, each result is checked: every convolution's output agrees
// with a direct sum at sampled positions, and the model gives finite
// (N, 10) logits, finite non-zero gradients for every parameter, and one
// SGD step on the batch lowers its loss; sgemm's products are compared with
// exact sums. A failed check exits 1. Prints the median and best milliseconds
// per step and samples/s (from the median), the step's share of the compute
// limit, and the breakdown.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "common/status.h"
#include "engine/kernels/cpu/gemm.h"
#include "engine/layers/conv2d.h"
#include "engine/losses/softmax_cross_entropy.h"
#include "engine/model.h"
#include "engine/optim/optimizer.h"

ABSL_FLAG(int64_t, batch_size, 64, "examples per step");
ABSL_FLAG(int, iters, 30, "timed steps per measurement");
ABSL_FLAG(int, warmup, 5, "untimed steps before each measurement");

namespace yoke::engine {
namespace {

void Fill(const Tensor& t, uint64_t seed) {
  common::Philox rng(seed, 7);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = 2.0f * rng.NextFloat() - 1.0f;
}

// Runs `step` warmup + iters times (an error stops it), prints the timings
// of the timed ones under `label` and returns their median in ms.
absl::StatusOr<double> Time(const std::string& label, int64_t n,
                            const std::function<absl::Status()>& step) {
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) RETURN_IF_ERROR(step());
  const int iters = absl::GetFlag(FLAGS_iters);
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(step());
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms[ms.size() / 2];
  std::printf("%-40s batch %lld: median %8.3f ms, best %8.3f ms, %10.0f samples/s\n", label.c_str(),
              static_cast<long long>(n), median, ms.front(), n / (median / 1000.0));
  return median;
}

struct ConvCase {
  int64_t h, w, c, k;
  bool input_grad;  // false for the first layer: nothing needs dL/dx
};
constexpr int64_t kKernel = 5;

// y(n, oy, ox, k) by a direct sum ("same" padding, stride 1: kKernel / 2
// zero rows and columns on each side for an odd kernel).
double DirectConv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c, int64_t n,
                  int64_t oy, int64_t ox, int64_t k) {
  const float* xp = x.data<float>();
  const float* wp = w.data<float>();
  double s = b.data<float>()[k];
  for (int64_t ky = 0; ky < kKernel; ++ky) {
    for (int64_t kx = 0; kx < kKernel; ++kx) {
      const int64_t iy = oy + ky - kKernel / 2, ix = ox + kx - kKernel / 2;
      if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
      for (int64_t ci = 0; ci < c.c; ++ci) {
        s += static_cast<double>(xp[((n * c.h + iy) * c.w + ix) * c.c + ci]) *
             wp[((k * kKernel + ky) * kKernel + kx) * c.c + ci];
      }
    }
  }
  return s;
}

absl::StatusOr<double> BenchConv(const ConvCase& c, int64_t n) {
  Conv2dLayer layer(c.k, kKernel, /*stride=*/1, /*same_padding=*/true, /*bias=*/true);
  layer.set_name("conv");
  ParamSet p;
  RETURN_IF_ERROR(layer.Build({{c.h, c.w, c.c}}, &p).status());
  RETURN_IF_ERROR(p.Finalize());
  p.Initialize(1);
  Tensor x = Tensor::Empty({n, c.h, c.w, c.c}), y = Tensor::Empty({n, c.h, c.w, c.k});
  Tensor dy = Tensor::Empty(y.shape()), dx = Tensor::Empty(x.shape());
  Fill(x, 1);
  Fill(dy, 2);
  RETURN_IF_ERROR(layer.Forward({&x}, &y, {}));
  common::Philox rng(3, 0);
  for (int i = 0; i < 256; ++i) {
    const int64_t b = rng.Uniform(n), oy = rng.Uniform(c.h), ox = rng.Uniform(c.w),
                  k = rng.Uniform(c.k);
    const double want = DirectConv(x, p.value(0), p.value(1), c, b, oy, ox, k);
    const float got = y.data<float>()[((b * c.h + oy) * c.w + ox) * c.k + k];
    if (!(std::fabs(got - want) <= 1e-4 * (1 + std::fabs(want)))) {
      return absl::InternalError(absl::StrCat("conv ", c.c, "->", c.k, ": y(", b, ", ", oy, ", ",
                                              ox, ", ", k, ") = ", got, ", direct sum ", want));
    }
  }
  return Time(absl::StrCat("conv 5x5 ", c.c, "->", c.k, " on ", c.h, "x", c.w, " fwd+bwd"), n,
              [&]() -> absl::Status {
                RETURN_IF_ERROR(layer.Forward({&x}, &y, {}));
                return layer.Backward({&x}, y, dy, {c.input_grad ? &dx : nullptr}, {});
              });
}

// Mean loss of `m` on (x, labels); with `dl`, also backpropagates it.
absl::StatusOr<double> Loss(Model& m, const Tensor& x, const Tensor& labels, Tensor* dl) {
  LayerContext ctx;
  ASSIGN_OR_RETURN(Tensor logits, m.Forward(x, ctx));
  SoftmaxCrossEntropy loss;
  const int64_t n = x.shape()[0];
  ASSIGN_OR_RETURN(LossResult r, loss.Compute(logits, labels, 1.0f / n, dl));
  if (dl != nullptr) RETURN_IF_ERROR(m.Backward(*dl, ctx));
  return r.loss_sum / n;
}

// Times the recipe's whole step (forward, loss, backward, SGD with momentum
// 0.9) and then breaks one more set of steps down by layer. Returns the
// median step in ms.
absl::StatusOr<double> BenchModel(int64_t n) {
  v1::ModelSpec spec;
  spec.set_zoo("cnn");
  ASSIGN_OR_RETURN(std::unique_ptr<Model> m, Model::Create(spec, {28, 28, 1}, 10));
  m->params().Initialize(1);
  Tensor x = Tensor::Empty({n, 28, 28, 1}), dl = Tensor::Empty({n, 10});
  Tensor labels = Tensor::Empty({n}, DType::kI32);
  Fill(x, 1);
  common::Philox rng(1, 2);
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(rng.Uniform(10));

  LayerContext ctx;
  ASSIGN_OR_RETURN(Tensor logits, m->Forward(x, ctx));
  if (logits.shape() != Shape{n, 10}) return absl::InternalError("logits are not (N, 10)");
  for (int64_t i = 0; i < logits.numel(); ++i) {
    if (!std::isfinite(logits.data<float>()[i])) return absl::InternalError("non-finite logit");
  }
  ASSIGN_OR_RETURN(const double before, Loss(*m, x, labels, &dl));
  for (const ParamSet::Entry& e : m->params().entries()) {
    const float* g = m->params().flat_grads().data<float>() + e.offset;
    double norm = 0;
    for (int64_t i = 0; i < NumElements(e.shape); ++i) {
      if (!std::isfinite(g[i])) return absl::InternalError(e.name + ": non-finite gradient");
      norm += std::fabs(g[i]);
    }
    if (norm == 0) return absl::InternalError(e.name + ": no gradient");
  }
  v1::OptimizerSpec sgd;
  sgd.set_type("sgd");
  sgd.set_lr(0.01f);
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, CreateOptimizer(sgd, &m->params()));
  RETURN_IF_ERROR(opt->Step(sgd.lr()));
  ASSIGN_OR_RETURN(const double after, Loss(*m, x, labels, nullptr));
  if (!(after < before)) {
    return absl::InternalError(
        absl::StrCat("an SGD step did not lower the loss: ", before, " -> ", after));
  }

  sgd.set_momentum(0.9f);
  ASSIGN_OR_RETURN(opt, CreateOptimizer(sgd, &m->params()));
  SoftmaxCrossEntropy loss;
  auto step = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Tensor logits, m->Forward(x, ctx));
    RETURN_IF_ERROR(loss.Compute(logits, labels, 1.0f / n, &dl).status());
    RETURN_IF_ERROR(m->Backward(dl, ctx));
    return opt->Step(sgd.lr());
  };
  ASSIGN_OR_RETURN(const double step_ms, Time("cnn zoo model step (fwd+bwd+sgd)", n, step));

  // The breakdown: per-layer sums over `iters` more steps, the optimizer and
  // the loss timed the same way; "other" is what the step spent outside them.
  const int iters = absl::GetFlag(FLAGS_iters);
  m->set_profiling(true);
  double sgd_s = 0, loss_s = 0, total_s = 0;
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(Tensor logits, m->Forward(x, ctx));
    const auto t1 = Clock::now();
    RETURN_IF_ERROR(loss.Compute(logits, labels, 1.0f / n, &dl).status());
    const auto t2 = Clock::now();
    RETURN_IF_ERROR(m->Backward(dl, ctx));
    const auto t3 = Clock::now();
    RETURN_IF_ERROR(opt->Step(sgd.lr()));
    const auto t4 = Clock::now();
    loss_s += secs(t1, t2);
    sgd_s += secs(t3, t4);
    total_s += secs(t0, t4);
  }
  m->set_profiling(false);
  std::printf("\nstep breakdown (mean of %d steps, %.3f ms each):\n", iters,
              1000 * total_s / iters);
  std::printf("  %-12s %-18s %10s %10s %7s\n", "layer", "type", "fwd ms", "bwd ms", "share");
  double accounted = sgd_s + loss_s;
  for (const Model::LayerTime& t : m->layer_times()) {
    accounted += t.forward_s + t.backward_s;
    std::printf("  %-12s %-18s %10.3f %10.3f %6.1f%%\n", t.name.c_str(), t.type.c_str(),
                1000 * t.forward_s / iters, 1000 * t.backward_s / iters,
                100 * (t.forward_s + t.backward_s) / total_s);
  }
  std::printf("  %-29s %10.3f %10s %6.1f%%\n", "loss (softmax cross-entropy)",
              1000 * loss_s / iters, "", 100 * loss_s / total_s);
  std::printf("  %-29s %10.3f %10s %6.1f%%\n", "optimizer (sgd, momentum)", 1000 * sgd_s / iters,
              "", 100 * sgd_s / total_s);
  std::printf("  %-29s %10.3f %10s %6.1f%%\n", "other", 1000 * (total_s - accounted) / iters, "",
              100 * (total_s - accounted) / total_s);
  return step_ms;
}

// The machine's compute limit for this thread count: the best rate of
// oneDNN's single-precision GEMM on square matrices, the kernel the
// convolutions and dense layers are built from. Checks the product first.
absl::StatusOr<double> GemmPeakGflops() {
  double best_rate = 0;
  for (int64_t d : {512, 1024, 2048}) {
    std::vector<float> a(d * d), b(d * d), c(d * d);
    for (int64_t i = 0; i < d * d; ++i) {
      a[i] = static_cast<float>(i % 7) - 3;  // small integers: the sums are exact
      b[i] = static_cast<float>(i % 5) - 2;
    }
    RETURN_IF_ERROR(cpu::Sgemm(false, false, d, d, d, 1.0f, a.data(), b.data(), 0.0f, c.data()));
    common::Philox rng(9, 0);
    for (int s = 0; s < 64; ++s) {
      const int64_t i = rng.Uniform(d), j = rng.Uniform(d);
      double want = 0;
      for (int64_t k = 0; k < d; ++k) want += double(a[i * d + k]) * b[k * d + j];
      if (c[i * d + j] != want) {
        return absl::InternalError(
            absl::StrCat("sgemm ", d, ": c(", i, ",", j, ") = ", c[i * d + j], ", want ", want));
      }
    }
    double best = 1e300;
    for (int it = 0; it < 5 + absl::GetFlag(FLAGS_iters) / 3; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(cpu::Sgemm(false, false, d, d, d, 1.0f, a.data(), b.data(), 0.0f, c.data()));
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double rate = 2.0 * d * d * d / best / 1e9;
    std::printf("%-40s %4lld^3: best %8.1f GFLOP/s\n", "sgemm (oneDNN)", static_cast<long long>(d),
                rate);
    best_rate = std::max(best_rate, rate);
  }
  return best_rate;
}

int Run() {
  const int64_t n = absl::GetFlag(FLAGS_batch_size);
  if (n <= 0 || absl::GetFlag(FLAGS_iters) <= 0 || absl::GetFlag(FLAGS_warmup) < 0) {
    std::fprintf(stderr, "cnn_step_bench: --batch_size and --iters must be > 0, --warmup >= 0\n");
    return 2;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "cnn_step_bench: %s\n", s.ToString().c_str());
    return 1;
  };
  absl::StatusOr<double> peak = GemmPeakGflops();
  if (!peak.ok()) return fail(peak.status());
  double convs_ms = 0;
  for (const ConvCase& c : {ConvCase{28, 28, 1, 32, false}, ConvCase{14, 14, 32, 64, true}}) {
    absl::StatusOr<double> ms = BenchConv(c, n);
    if (!ms.ok()) return fail(ms.status());
    convs_ms += *ms;
  }
  absl::StatusOr<double> step_ms = BenchModel(n);
  if (!step_ms.ok()) return fail(step_ms.status());

  // Nominal FLOPs of a step: forward, backward-weights and backward-data of
  // every conv and dense layer (2 per multiply-add), less the first conv's
  // backward-data, which nothing needs. The padded borders of a "same"
  // convolution count in full, as is the convention.
  v1::ModelSpec spec;
  spec.set_zoo("cnn");
  auto m = Model::Create(spec, {28, 28, 1}, 10);
  if (!m.ok()) return fail(m.status());
  const double fwd_macs = static_cast<double>((*m)->ForwardMacsPerExample());
  const double conv1_macs = 28.0 * 28 * 32 * kKernel * kKernel * 1;
  const double step_gflop = 2.0 * n * (3 * fwd_macs - conv1_macs) / 1e9;
  const double limit_ms = step_gflop / *peak * 1000;
  std::printf("\ncompute limit: %.3f GFLOP per step at the sgemm peak of %.1f GFLOP/s = %.3f ms\n",
              step_gflop, *peak, limit_ms);
  std::printf(
      "step: %.3f ms = %.1f GFLOP/s = %.1f%% of the limit; the two convolutions "
      "alone take %.3f ms of it\n",
      *step_ms, step_gflop / (*step_ms / 1000), 100 * limit_ms / *step_ms, convs_ms);
  return 0;
}

}  // namespace
}  // namespace yoke::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return yoke::engine::Run();
}
