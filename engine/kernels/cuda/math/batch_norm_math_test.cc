// Host tests of the CUDA batch_norm's functors and sequences
// (math/batch_norm.h), run with HostForEach against the CPU layer
// (engine/layers/batch_norm.h) on random data: training and eval Forward,
// the running statistics, and Backward (dx, dgamma, dbeta).
//
// Tolerance: the CPU layer runs oneDNN, which accumulates the statistics in
// float in its own order and fuses its own arithmetic, where the functors
// accumulate in double in a fixed order; outputs agree to float rounding,
// checked as |got - want| <= 1e-5 * max|want| over each array (a per-array
// scale, since dx's entries come from a difference of terms near zero).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/kernels/cuda/math/batch_norm.h"
#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/layers/batch_norm.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

struct HostRunner {
  template <typename F>
  bool operator()(const char*, int64_t n, const F& f) {
    HostForEach(n, f);
    return true;
  }
};

std::vector<float> Vec(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

void ExpectClose(const std::vector<float>& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel()) << what;
  const float* w = want.data<float>();
  float scale = 0.0f;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(w[i]));
  const float tol = 1e-5f * std::max(scale, 1e-3f);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], w[i], tol) << what << " at " << i;
  }
}

// The CPU layer and the functors' host buffers on the same data.
struct Case {
  Shape shape;  // per example, channels last
  int64_t n;
  int64_t c = 0, rows = 0;
  BatchNormLayer layer{0.1f, 1e-3f};
  ParamSet params;
  Tensor x, dy;
  // The functors' copies of gamma, beta and the running statistics.
  std::vector<float> gamma, beta, running_mean, running_var;
  std::vector<float> floats;
  std::vector<double> doubles;
  BnBuffers b;

  Case(const Shape& s, int64_t batch) : shape(s), n(batch) {
    layer.set_name("bn");
    EXPECT_TRUE(layer.Build({shape}, &params).ok());
    EXPECT_TRUE(params.Finalize().ok());
    c = shape.back();
    Shape full = shape;
    full.insert(full.begin(), n);
    x = Tensor::Empty(full);
    dy = Tensor::Empty(full);
    rows = x.numel() / c;
    testing::FillUniform(x, 1, 1, 0.5f, 2.5f);  // a mean far from 0
    testing::FillUniform(dy, 1, 2, -1.0f, 1.0f);
    testing::FillUniform(params.value(0), 1, 3, 0.5f, 1.5f);   // gamma
    testing::FillUniform(params.value(1), 1, 4, -0.5f, 0.5f);  // beta
    testing::FillUniform(params.state(0), 1, 5, -0.2f, 0.2f);  // running mean
    testing::FillUniform(params.state(1), 1, 6, 0.5f, 2.0f);   // running var
    gamma = Vec(params.value(0));
    beta = Vec(params.value(1));
    running_mean = Vec(params.state(0));
    running_var = Vec(params.state(1));
    floats.assign(kBnChannelFloats * c, -9.0f);
    doubles.assign(BnScratchDoubles(rows, c), -9.0);
    b = BnLayout(rows, c, floats.data(), doubles.data());
  }
  BnParams Params() {
    return BnParams{gamma.data(),       beta.data(), running_mean.data(),
                    running_var.data(), 0.1f,        1e-3f};
  }
  std::string Name() const {
    std::string s = "N " + std::to_string(n) + " shape (";
    for (int64_t d : shape) s += std::to_string(d) + ",";
    return s + ")";
  }
};

const std::vector<std::pair<Shape, int64_t>> kCases = {
    {{3}, 1},       {{1}, 3},         {{3}, 3},       {{2, 2, 1}, 1},
    {{4, 5, 3}, 3}, {{10, 20, 3}, 3}, {{7, 7, 5}, 2}, {{1, 1, 3}, 1},
};

void ForwardBackward(bool training) {
  for (const auto& [shape, n] : kCases) {
    Case k(shape, n);
    SCOPED_TRACE(k.Name() + (training ? " training" : " eval"));
    LayerContext ctx;
    ctx.training = training;
    Tensor y = Tensor::Empty(k.x.shape()), dx = Tensor::Empty(k.x.shape());
    ASSERT_TRUE(k.layer.Forward({&k.x}, &y, ctx).ok());
    ASSERT_TRUE(k.layer.Backward({&k.x}, y, k.dy, {&dx}, ctx).ok());

    HostRunner run;
    const BnParams p = k.Params();
    std::vector<float> got_y(k.x.numel(), -5.0f), got_dx(k.x.numel(), -5.0f);
    std::vector<float> dgamma(k.c, -5.0f), dbeta(k.c, -5.0f);
    ASSERT_TRUE(training ? BnForwardTraining(run, k.b, p, k.x.data<float>(), got_y.data())
                         : BnForwardInference(run, k.b, p, k.x.data<float>(), got_y.data()));
    ASSERT_TRUE(BnBackward(run, k.b, p, training, k.x.data<float>(), k.dy.data<float>(),
                           got_dx.data(), dgamma.data(), dbeta.data()));
    ExpectClose(got_y, y, "y");
    ExpectClose(k.running_mean, k.params.state(0), "running_mean");
    ExpectClose(k.running_var, k.params.state(1), "running_var");
    ExpectClose(got_dx, dx, "dx");
    ExpectClose(dgamma, k.params.grad(0), "dgamma");
    ExpectClose(dbeta, k.params.grad(1), "dbeta");

    // Without dx: the same parameter gradients, overwritten.
    std::fill(dgamma.begin(), dgamma.end(), 123.0f);
    ASSERT_TRUE(BnBackward(run, k.b, p, training, k.x.data<float>(), k.dy.data<float>(), nullptr,
                           dgamma.data(), dbeta.data()));
    ExpectClose(dgamma, k.params.grad(0), "dgamma without dx");
  }
}

TEST(CudaBatchNormMathTest, TrainingEqualsCpu) { ForwardBackward(true); }

TEST(CudaBatchNormMathTest, EvalEqualsCpu) { ForwardBackward(false); }

// The running statistics after two training steps, bit for bit given the
// same batch statistics: BnRunningFn is the CPU's float expression.
TEST(CudaBatchNormMathTest, RunningUpdateIsTheCpuExpression) {
  const std::vector<float> mean = {0.25f, -1.5f, 3.0f}, var = {0.5f, 2.0f, 0.0f};
  std::vector<float> rm = {0.1f, 0.2f, -0.3f}, rv = {1.0f, 0.7f, 1.3f};
  for (int64_t rows : {1, 3, 600}) {
    std::vector<float> want_m = rm, want_v = rv;
    const double m = static_cast<double>(rows);
    const float unbias = m > 1 ? static_cast<float>(m / (m - 1)) : 1.0f;
    for (int j = 0; j < 3; ++j) {
      want_m[j] = (1.0f - 0.1f) * want_m[j] + 0.1f * mean[j];
      want_v[j] = (1.0f - 0.1f) * want_v[j] + 0.1f * var[j] * unbias;
    }
    HostForEach(3,
                BnRunningFn{rm.data(), rv.data(), mean.data(), var.data(), 0.1f, BnUnbias(rows)});
    EXPECT_EQ(rm, want_m);
    EXPECT_EQ(rv, want_v);
  }
}

// The two-level sums do not depend on where the chunks fall: a batch of
// 600 rows (3 chunks) gives the statistics of a naive double loop.
TEST(CudaBatchNormMathTest, ChunkedStatisticsEqualNaive) {
  Case k({10, 20, 3}, 3);
  HostRunner run;
  std::vector<float> y(k.x.numel());
  ASSERT_TRUE(BnForwardTraining(run, k.b, k.Params(), k.x.data<float>(), y.data()));
  for (int64_t ch = 0; ch < k.c; ++ch) {
    double s = 0.0;
    for (int64_t r = 0; r < k.rows; ++r) s += k.x.data<float>()[r * k.c + ch];
    const double mean = s / k.rows;
    double q = 0.0;
    for (int64_t r = 0; r < k.rows; ++r) {
      const double d = k.x.data<float>()[r * k.c + ch] - mean;
      q += d * d;
    }
    EXPECT_FLOAT_EQ(k.b.mean[ch], static_cast<float>(mean));
    EXPECT_FLOAT_EQ(k.b.var[ch], static_cast<float>(q / k.rows));
  }
}

}  // namespace
}  // namespace yoke::engine::cuda
