#include "engine/layers/batch_norm.h"

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/kernels/cpu/batch_norm.h"
#include "engine/registry.h"
#include "engine/testing/grad_check.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

void Fill(const Tensor& t, uint64_t seed, float lo, float hi) {
  testing::FillUniform(t, seed, 9, lo, hi);
}

struct Stats {
  std::vector<double> mean, var;  // biased var
};
Stats NaiveStats(const Tensor& x, int64_t c) {
  const int64_t m = x.numel() / c;
  Stats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c; ++j) s.mean[j] += x.data<float>()[i * c + j];
  for (int64_t j = 0; j < c; ++j) s.mean[j] /= m;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < c; ++j) {
      double d = x.data<float>()[i * c + j] - s.mean[j];
      s.var[j] += d * d;
    }
  for (int64_t j = 0; j < c; ++j) s.var[j] /= m;
  return s;
}

TEST(BatchNormTest, TrainingForwardAndRunningStats) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{6}}) {
    const int64_t c = shape.back(), n = 4;
    BatchNormLayer layer(0.1f, 1e-5f);
    layer.set_name("bn");
    ParamSet p;
    ASSERT_EQ(*layer.Build({shape}, &p), shape);
    EXPECT_TRUE(p.Finalize().ok());
    p.Initialize(1);
    float* gamma = p.value(0).data<float>();
    float* beta = p.value(1).data<float>();
    for (int64_t j = 0; j < c; ++j) {
      EXPECT_EQ(gamma[j], 1.0f);  // init
      EXPECT_EQ(beta[j], 0.0f);
      EXPECT_EQ(p.state(0).data<float>()[j], 0.0f);
      EXPECT_EQ(p.state(1).data<float>()[j], 1.0f);
      gamma[j] = 0.5f + 0.25f * j;
      beta[j] = -0.1f * j;
    }
    Shape full = shape;
    full.insert(full.begin(), n);
    Tensor x = Tensor::Empty(full), y = Tensor::Empty(full);
    std::vector<double> want_mean(c, 0.0), want_var(c, 1.0);
    for (int step = 0; step < 2; ++step) {
      Fill(x, 10 + step, -2.0f + step, 3.0f);
      ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
      Stats s = NaiveStats(x, c);
      const int64_t m = x.numel() / c;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < c; ++j) {
          double want =
              gamma[j] * (x.data<float>()[i * c + j] - s.mean[j]) / std::sqrt(s.var[j] + 1e-5) +
              beta[j];
          ASSERT_NEAR(y.data<float>()[i * c + j], want, 1e-4);
        }
      for (int64_t j = 0; j < c; ++j) {
        want_mean[j] = 0.9 * want_mean[j] + 0.1 * s.mean[j];
        want_var[j] = 0.9 * want_var[j] + 0.1 * s.var[j] * m / (m - 1.0);
        EXPECT_NEAR(p.state(0).data<float>()[j], want_mean[j], 1e-5);
        EXPECT_NEAR(p.state(1).data<float>()[j], want_var[j], 1e-5);
      }
    }
  }
}

TEST(BatchNormTest, EvalUsesRunningStatsAndLeavesThem) {
  BatchNormLayer layer(0.1f, 1e-3f);
  layer.set_name("bn");
  ParamSet p;
  ASSERT_TRUE(layer.Build({{2, 2, 3}}, &p).ok());
  EXPECT_TRUE(p.Finalize().ok());
  p.Initialize(1);
  float rm[] = {0.5f, -1.0f, 2.0f}, rv[] = {4.0f, 0.25f, 1.0f};
  float g[] = {2.0f, 1.0f, -1.0f}, b[] = {0.0f, 1.0f, 0.5f};
  std::copy(rm, rm + 3, p.state(0).data<float>());
  std::copy(rv, rv + 3, p.state(1).data<float>());
  std::copy(g, g + 3, p.value(0).data<float>());
  std::copy(b, b + 3, p.value(1).data<float>());
  Tensor x = Tensor::Empty({2, 2, 2, 3}), y = Tensor::Empty({2, 2, 2, 3});
  Fill(x, 3, -1, 1);
  LayerContext eval;
  eval.training = false;
  ASSERT_TRUE(layer.Forward({&x}, &y, eval).ok());
  for (int64_t i = 0; i < x.numel(); ++i) {
    int j = i % 3;
    float want = g[j] * (x.data<float>()[i] - rm[j]) / std::sqrt(rv[j] + 1e-3f) + b[j];
    ASSERT_NEAR(y.data<float>()[i], want, 1e-5);
  }
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(p.state(0).data<float>()[j], rm[j]);
    EXPECT_EQ(p.state(1).data<float>()[j], rv[j]);
  }
}

TEST(BatchNormTest, GradientsMatchFiniteDifferencesInTraining) {
  for (const Shape& shape : {Shape{3, 4, 5}, Shape{5, 3, 2}, Shape{7}}) {
    BatchNormLayer layer(0.1f, 1e-5f);
    layer.set_name("bn");
    testing::CheckLayerGradients(&layer, {shape}, 3);
  }
}

TEST(BatchNormTest, GradientsMatchFiniteDifferencesInEval) {
  BatchNormLayer layer(0.1f, 1e-5f);
  layer.set_name("bn");
  testing::GradCheckOptions o;
  o.training = false;
  testing::CheckLayerGradients(&layer, {{3, 3, 4}}, 2, o);
}

TEST(BatchNormTest, BackwardWithoutInputGradient) {
  BatchNormLayer layer(0.1f, 1e-5f);
  layer.set_name("bn");
  ParamSet p;
  ASSERT_TRUE(layer.Build({{4}}, &p).ok());
  EXPECT_TRUE(p.Finalize().ok());
  p.Initialize(1);
  Tensor x = Tensor::Empty({5, 4}), y = Tensor::Empty({5, 4}), dy = Tensor::Empty({5, 4});
  Fill(x, 1, -1, 1);
  Fill(dy, 2, -1, 1);
  ASSERT_TRUE(layer.Forward({&x}, &y, {}).ok());
  absl::Status st = layer.Backward({&x}, y, dy, {nullptr}, {});
  ASSERT_TRUE(st.ok()) << st;
  // dbeta = sum dy; dgamma = sum dy * xhat, with xhat = (y - beta) / gamma.
  for (int j = 0; j < 4; ++j) {
    double db = 0, dg = 0;
    for (int i = 0; i < 5; ++i) {
      db += dy.data<float>()[i * 4 + j];
      dg += dy.data<float>()[i * 4 + j] * y.data<float>()[i * 4 + j];  // gamma 1, beta 0
    }
    EXPECT_NEAR(p.grad(1).data<float>()[j], db, 1e-5);
    EXPECT_NEAR(p.grad(0).data<float>()[j], dg, 1e-4);
  }
}

// An in-memory CrossReplicaSum for `parties` replicas running as threads:
// each call blocks until every party has contributed, then hands each the
// sum. Counts must agree, as over a real communicator.
class ThreadSum {
 public:
  explicit ThreadSum(int parties) : parties_(parties) {
    for (int i = 0; i < parties; ++i) handles_.emplace_back(this);
  }
  CrossReplicaSum* party(int i) { return &handles_[i]; }
  int calls() {
    absl::MutexLock l(&mu_);
    return rounds_;
  }

 private:
  struct Handle final : CrossReplicaSum {
    explicit Handle(ThreadSum* s) : s(s) {}
    absl::Status SumInPlace(float* data, int64_t count, const std::string& what) override {
      return s->Sum(data, count, what);
    }
    ThreadSum* s;
  };
  absl::Status Sum(float* data, int64_t count, const std::string& what) {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(
        +[](int* left) { return *left == 0; }, &readers_left_));
    if (arrived_ == 0) {
      acc_.assign(count, 0.0f);
      what_ = what;
    }
    if (static_cast<int64_t>(acc_.size()) != count || what_ != what) {
      return absl::InternalError(absl::StrCat("mismatched sums: '", what, "' of ", count, " vs '",
                                              what_, "' of ", acc_.size()));
    }
    for (int64_t i = 0; i < count; ++i) acc_[i] += data[i];
    const int64_t round = rounds_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      readers_left_ = parties_;
      ++rounds_;
    } else {
      auto done = [&] { return rounds_ != round; };
      mu_.Await(absl::Condition(&done));
    }
    std::copy(acc_.begin(), acc_.end(), data);
    --readers_left_;
    return absl::OkStatus();
  }

  const int parties_;
  std::vector<Handle> handles_;
  absl::Mutex mu_;
  std::vector<float> acc_;  // guarded by mu_
  std::string what_;        // guarded by mu_
  int arrived_ = 0, readers_left_ = 0;
  int64_t rounds_ = 0;  // guarded by mu_
};

// Copies rows [begin, begin + n) of x (batch first) into a new tensor.
Tensor Rows(const Tensor& x, int64_t begin, int64_t n) {
  Shape s = x.shape();
  const int64_t per = x.numel() / s[0];
  s[0] = n;
  Tensor out = Tensor::Empty(s);
  std::copy(x.data<float>() + begin * per, x.data<float>() + (begin + n) * per, out.data<float>());
  return out;
}

// Synchronized batch norm over replicas with uneven batches (2, 3 and 1
// examples) must equal one batch norm over the union of their batches:
// outputs, input gradients, summed parameter gradients and running stats.
TEST(BatchNormTest, SynchronizedOverReplicasEqualsOneLayerOverTheUnion) {
  const Shape shape = {3, 3, 4};  // (H, W, C)
  const int64_t c = 4;
  const std::vector<int64_t> sizes = {2, 3, 1};
  const int64_t total = 6;
  const int parties = static_cast<int>(sizes.size());
  auto make = [&](BatchNormLayer* layer, ParamSet* p) {
    layer->set_name("bn");
    ASSERT_TRUE(layer->Build({shape}, p).ok());
    EXPECT_TRUE(p->Finalize().ok());
    p->Initialize(1);
    for (int64_t j = 0; j < c; ++j) {
      p->value(0).data<float>()[j] = 0.5f + 0.3f * j;  // gamma
      p->value(1).data<float>()[j] = 0.2f - 0.1f * j;  // beta
    }
  };
  Shape full = shape;
  full.insert(full.begin(), total);
  Tensor x = Tensor::Empty(full), dy = Tensor::Empty(full);
  Fill(x, 3, -2.0f, 3.0f);  // a mean far from 0: the variance pass must centre
  Fill(dy, 4, -1.0f, 1.0f);

  // Reference: one layer, the whole batch, two steps (running stats move twice).
  BatchNormLayer ref(0.1f, 1e-5f);
  ParamSet rp;
  make(&ref, &rp);
  Tensor ry = Tensor::Empty(full), rdx = Tensor::Empty(full);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(ref.Forward({&x}, &ry, {}).ok());
    ASSERT_TRUE(ref.Backward({&x}, ry, dy, {&rdx}, {}).ok());
  }

  ThreadSum sum(parties);
  std::vector<std::unique_ptr<BatchNormLayer>> layers;
  std::vector<ParamSet> params(parties);
  std::vector<Tensor> xs, dys, ys, dxs;
  int64_t begin = 0;
  for (int r = 0; r < parties; ++r) {
    layers.push_back(std::make_unique<BatchNormLayer>(0.1f, 1e-5f));
    make(layers[r].get(), &params[r]);
    xs.push_back(Rows(x, begin, sizes[r]));
    dys.push_back(Rows(dy, begin, sizes[r]));
    ys.push_back(Tensor::Empty(xs[r].shape()));
    dxs.push_back(Tensor::Empty(xs[r].shape()));
    begin += sizes[r];
  }
  std::vector<absl::Status> status(parties);
  std::vector<std::thread> threads;
  for (int r = 0; r < parties; ++r) {
    threads.emplace_back([&, r] {
      LayerContext ctx;
      ctx.sync_stats = sum.party(r);
      for (int step = 0; step < 2 && status[r].ok(); ++step) {
        status[r] = layers[r]->Forward({&xs[r]}, &ys[r], ctx);
        if (status[r].ok())
          status[r] = layers[r]->Backward({&xs[r]}, ys[r], dys[r], {&dxs[r]}, ctx);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < parties; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
  EXPECT_EQ(sum.calls(), 2 * 3);  // per step: 2 forward sums, 1 backward

  std::vector<double> dgamma(c, 0.0), dbeta(c, 0.0);
  begin = 0;
  for (int r = 0; r < parties; ++r) {
    const int64_t per = xs[r].numel();
    for (int64_t i = 0; i < per; ++i) {
      const int64_t at = begin * (x.numel() / total) + i;
      ASSERT_NEAR(ys[r].data<float>()[i], ry.data<float>()[at], 1e-4) << "y, replica " << r;
      ASSERT_NEAR(dxs[r].data<float>()[i], rdx.data<float>()[at], 1e-4) << "dx, replica " << r;
    }
    for (int64_t j = 0; j < c; ++j) {
      dgamma[j] += params[r].grad(0).data<float>()[j];
      dbeta[j] += params[r].grad(1).data<float>()[j];
      // Every replica's running stats follow the global batch's.
      EXPECT_NEAR(params[r].state(0).data<float>()[j], rp.state(0).data<float>()[j], 1e-5);
      EXPECT_NEAR(params[r].state(1).data<float>()[j], rp.state(1).data<float>()[j], 1e-4);
    }
    begin += sizes[r];
  }
  for (int64_t j = 0; j < c; ++j) {
    EXPECT_NEAR(dgamma[j], rp.grad(0).data<float>()[j], 1e-4);
    EXPECT_NEAR(dbeta[j], rp.grad(1).data<float>()[j], 1e-4);
  }

  // Without synchronization the replicas' outputs differ from the union's:
  // the comparison above can tell the two apart.
  BatchNormLayer alone(0.1f, 1e-5f);
  ParamSet ap;
  make(&alone, &ap);
  Tensor ay = Tensor::Empty(xs[1].shape());
  ASSERT_TRUE(alone.Forward({&xs[1]}, &ay, {}).ok());
  double max_diff = 0;
  for (int64_t i = 0; i < ay.numel(); ++i) {
    max_diff = std::max<double>(
        max_diff,
        std::fabs(ay.data<float>()[i] - ry.data<float>()[sizes[0] * (x.numel() / total) + i]));
  }
  EXPECT_GT(max_diff, 1e-2);
}

// The synchronized Backward against finite differences (one replica, whose
// sums are the identity), through the same grad checker as the plain path.
TEST(BatchNormTest, SynchronizedGradientsMatchFiniteDifferences) {
  ThreadSum one(1);
  BatchNormLayer layer(0.1f, 1e-5f);
  layer.set_name("bn");
  testing::GradCheckOptions o;
  o.sync_stats = one.party(0);
  testing::CheckLayerGradients(&layer, {{3, 4, 5}}, 3, o);
  EXPECT_GT(one.calls(), 0);
}

TEST(BatchNormTest, RejectsBadSpecs) {
  v1::LayerSpec s;
  s.mutable_batch_norm()->set_momentum(1.5f);
  auto l = LayerRegistry::Global().Create(s);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("batch_norm.momentum"), std::string::npos);
  s.mutable_batch_norm()->set_momentum(0);
  s.mutable_batch_norm()->set_epsilon(-1);
  l = LayerRegistry::Global().Create(s);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("batch_norm.epsilon"), std::string::npos);
  s.mutable_batch_norm()->set_epsilon(0);
  l = LayerRegistry::Global().Create(s);
  ASSERT_TRUE(l.ok());
  ParamSet p;
  (*l)->set_name("bn");
  EXPECT_FALSE((*l)->Build({{}}, &p).ok());
}

// ---- The kernel: normalising again with the kept statistics ----

struct Shape {
  int64_t rows, channels;
};

class BatchNormPlanTest : public ::testing::TestWithParam<Shape> {};

// training.recompute_batch_norm runs a batch norm's Forward again in backward
// and relies on getting the first Forward's output to the bit: the next
// layer's backward reads it, and the tests of training with and without the
// option compare gradients bit for bit.
TEST_P(BatchNormPlanTest, NormalisingWithTheKeptStatisticsGivesTheTrainingOutputToTheBit) {
  const Shape s = GetParam();
  Tensor xt = Tensor::Empty({s.rows, s.channels});
  Fill(xt, 11, -1, 1);
  const float* x = xt.data<float>();
  const int64_t n = xt.numel();
  std::vector<float> gamma = testing::UniformVector(s.channels, 12, 1);
  const std::vector<float> beta = testing::UniformVector(s.channels, 13, 1);
  for (float& g : gamma) g += 1.5f;
  auto plan = cpu::BatchNormPlan::Create(s.rows, s.channels, 1e-5f);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<float> y(n), again(n, -7.0f);
  ASSERT_TRUE((*plan)->ForwardTraining(x, gamma.data(), beta.data(), y.data()).ok());
  const std::vector<float> mean((*plan)->batch_mean(), (*plan)->batch_mean() + s.channels);
  const std::vector<float> var((*plan)->batch_var(), (*plan)->batch_var() + s.channels);
  ASSERT_TRUE((*plan)->ForwardWithBatchStats(x, gamma.data(), beta.data(), again.data()).ok());
  EXPECT_EQ(std::memcmp(y.data(), again.data(), y.size() * sizeof(float)), 0)
      << "the second pass differs from ForwardTraining's output";
  // The statistics it used are the kept ones, unchanged, and they are the
  // batch's (a pass that normalised by anything else fails above or here).
  EXPECT_EQ(std::memcmp(mean.data(), (*plan)->batch_mean(), mean.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(var.data(), (*plan)->batch_var(), var.size() * sizeof(float)), 0);
  const Stats st = NaiveStats(xt, s.channels);
  for (int64_t c = 0; c < s.channels; ++c) {
    const double m = st.mean[c], v = st.var[c];
    ASSERT_NEAR(mean[c], m, 1e-4) << "channel " << c;
    ASSERT_NEAR(var[c], v, 1e-3 * v) << "channel " << c;
    const int64_t r = s.rows / 2;
    const double want = gamma[c] * (x[r * s.channels + c] - m) / std::sqrt(v + 1e-5) + beta[c];
    ASSERT_NEAR(again[r * s.channels + c], want, 1e-4 * (1 + std::fabs(want))) << "channel " << c;
  }
}

// Channel counts on and off the vector width, rows from one small image to a
// ResNet-50 stage's.
INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormPlanTest,
                         ::testing::Values(Shape{7, 3}, Shape{64, 16}, Shape{1000, 17},
                                           Shape{4096, 64}, Shape{16 * 56 * 56, 64},
                                           Shape{16 * 7 * 7, 2048}));

}  // namespace
}  // namespace yoke::engine
