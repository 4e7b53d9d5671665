// CNN step benchmark: where the Fashion-MNIST CNN's training step goes.
//
//   cnn_step_bench [--batch_size 64] [--iters 30] [--warmup 5]
//
// Times, on Fashion-MNIST-sized input (28, 28, 1) and random data:
//   - each of the zoo CNN's two convolutions alone (5x5, "same", 1->32 on
//     28x28 and 32->64 on 14x14; forward + backward, dL/dx only where the
//     model needs it);
//   - the whole model's step, forward + backward (no optimizer), as the
//     trainer runs it.
// Before timing, each result is checked: every convolution's output agrees
// with a direct sum at sampled positions, and the model gives finite
// (N, 10) logits, finite non-zero gradients for every parameter, and one
// SGD step on the batch lowers its loss. A failed check exits 1. Prints the
// mean and best milliseconds per step and samples/s (from the mean).
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

// Runs `step` warmup + iters times (an error stops it) and prints the
// timings of the timed ones under `label`.
absl::Status Time(const std::string& label, int64_t n, const std::function<absl::Status()>& step) {
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) RETURN_IF_ERROR(step());
  const int iters = absl::GetFlag(FLAGS_iters);
  double best = 1e300, total = 0;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(step());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, ms);
    total += ms;
  }
  const double mean = total / iters;
  std::printf("%-40s batch %lld: mean %8.3f ms, best %8.3f ms, %10.0f samples/s\n",
              label.c_str(), static_cast<long long>(n), mean, best, n / (mean / 1000.0));
  return absl::OkStatus();
}

struct ConvCase {
  int64_t h, w, c, k;
  bool input_grad;  // false for the first layer: nothing needs dL/dx
};
constexpr int64_t kKernel = 5;

// y(n, oy, ox, k) by a direct sum ("same" padding, stride 1: kKernel / 2
// zero rows and columns on each side for an odd kernel).
double DirectConv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCase& c,
                  int64_t n, int64_t oy, int64_t ox, int64_t k) {
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

absl::Status BenchConv(const ConvCase& c, int64_t n) {
  Conv2dLayer layer(c.k, kKernel, /*stride=*/1, /*same_padding=*/true, /*bias=*/true);
  layer.set_name("conv");
  ParamSet p;
  RETURN_IF_ERROR(layer.Build({{c.h, c.w, c.c}}, &p).status());
  p.Finalize();
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

absl::Status BenchModel(int64_t n) {
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

  Fill(dl, 2);
  return Time("cnn zoo model fwd+bwd", n, [&]() -> absl::Status {
    RETURN_IF_ERROR(m->Forward(x, ctx).status());
    return m->Backward(dl, ctx);
  });
}

int Run() {
  const int64_t n = absl::GetFlag(FLAGS_batch_size);
  if (n <= 0 || absl::GetFlag(FLAGS_iters) <= 0 || absl::GetFlag(FLAGS_warmup) < 0) {
    std::fprintf(stderr, "cnn_step_bench: --batch_size and --iters must be > 0, --warmup >= 0\n");
    return 2;
  }
  for (const ConvCase& c : {ConvCase{28, 28, 1, 32, false}, ConvCase{14, 14, 32, 64, true}}) {
    if (absl::Status s = BenchConv(c, n); !s.ok()) {
      std::fprintf(stderr, "cnn_step_bench: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (absl::Status s = BenchModel(n); !s.ok()) {
    std::fprintf(stderr, "cnn_step_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace yoke::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return yoke::engine::Run();
}
