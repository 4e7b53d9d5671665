// Per-op parity (`make gpu-check` stage 3), second half: the CUDA losses
// (loss sum, correct count and dlogits) and optimizers (parameters and
// state after three steps, and the gradient norm) against the CPU engine's
// on the same data. fp32: relative L2 <= 1e-5; the correct count exactly.
//
// gpu-labelled: skips without a CUDA device.
#include <cmath>
#include <string>

#include "engine/cuda_parity/parity_util.h"
#include "engine/device_backend.h"
#include "engine/losses/loss.h"
#include "engine/optim/optimizer.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace yoke::engine::parity {
namespace {

constexpr double kFp32 = 1e-5;

Measure Scalar(double got, double want) {
  Tensor g = Tensor::Empty({1}), w = Tensor::Empty({1});
  g.data<float>()[0] = static_cast<float>(got);
  w.data<float>()[0] = static_cast<float>(want);
  return Compare(g, w);
}

struct LossCase {
  std::string name, loss;
  float smoothing;
  int64_t n;
  int k;
};

class LossParityTest : public ::testing::TestWithParam<LossCase> {};

TEST_P(LossParityTest, MatchesCpu) {
  SKIP_UNLESS_PARITY_DEVICE();
  const LossCase& c = GetParam();
  auto cpu = CreateLoss(c.loss, c.smoothing);
  auto gpu = CreateLoss(c.loss, c.smoothing, Gpu());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  Tensor z = RandomHost({c.n, c.k}, 1, -3.0f, 3.0f);
  Tensor y = RandomLabels(c.n, c.k, 2);
  Tensor dz = Tensor::Empty({c.n, c.k}), dzd = NanDevice({c.n, c.k});
  const float scale = 1.0f / static_cast<float>(c.n);
  auto rc = (*cpu)->Compute(z, y, scale, &dz);
  auto rg = (*gpu)->Compute(ToDevice(z), ToDevice(y), scale, &dzd);
  ASSERT_TRUE(rc.ok()) << rc.status();
  ASSERT_TRUE(rg.ok()) << rg.status();
  bool ok = Record(c.name, "loss", Scalar(rg->loss_sum, rc->loss_sum), kFp32);
  ok &= Record(c.name, "correct", Scalar(rg->correct, rc->correct), 0);
  ok &= Record(c.name, "dlogits", Compare(ToHost(dzd), dz), kFp32);
  EXPECT_TRUE(ok) << c.name;

  // A label out of range is refused, as on the CPU.
  Tensor bad = RandomLabels(c.n, c.k, 3);
  bad.data<int32_t>()[c.n - 1] = c.k;
  auto refused = (*gpu)->Compute(ToDevice(z), ToDevice(bad), scale, &dzd);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

INSTANTIATE_TEST_SUITE_P(
    Losses, LossParityTest,
    ::testing::Values(LossCase{"xent", "softmax_cross_entropy", 0, 5, 10},
                      LossCase{"xent_smooth", "softmax_cross_entropy", 0.1f, 7, 3},
                      LossCase{"xent_1000", "softmax_cross_entropy", 0, 4, 1000},
                      LossCase{"mse", "mse", 0, 6, 4}),
    [](const auto& info) { return info.param.name; });

struct OptCase {
  std::string name, spec;
};

// Parameters of odd sizes (so the padding between entries is covered), over
// 8192 values in all (so the norm's two-level sum has several blocks).
void Declare(ParamSet* p) {
  p->Declare("a/kernel", {37, 3}, Init::Uniform(1.0f));
  p->Declare("a/bias", {5}, Init::Uniform(1.0f));
  p->Declare("b/kernel", {97, 101}, Init::Uniform(0.1f));
}

class OptimizerParityTest : public ::testing::TestWithParam<OptCase> {};

TEST_P(OptimizerParityTest, ThreeStepsMatchCpu) {
  SKIP_UNLESS_PARITY_DEVICE();
  const OptCase& c = GetParam();
  v1::OptimizerSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(c.spec, &spec)) << c.spec;
  ParamSet pc, pg;
  Declare(&pc);
  Declare(&pg);
  ASSERT_TRUE(pc.Finalize().ok());
  ASSERT_TRUE(pg.Finalize(Gpu()).ok());
  pc.Initialize(5);
  pg.Initialize(5);
  auto oc = CreateOptimizer(spec, &pc);
  auto og = CreateOptimizer(spec, &pg);
  ASSERT_TRUE(oc.ok()) << oc.status();
  ASSERT_TRUE(og.ok()) << og.status();
  bool ok = true;
  for (int step = 0; step < 3; ++step) {
    Tensor g = RandomHost(pc.flat_grads().shape(), 50 + step);
    pc.flat_grads().CopyFrom(g);
    pg.flat_grads().CopyFrom(g);
    ASSERT_TRUE((*oc)->Step(0.05f, 0.5f).ok());
    absl::Status s = (*og)->Step(0.05f, 0.5f);
    ASSERT_TRUE(s.ok()) << s;
  }
  ok &= Record(c.name, "values", Compare(ToHost(pg.flat_values()), pc.flat_values()), kFp32);
  auto sc = (*oc)->State();
  auto sg = (*og)->State();
  ASSERT_EQ(sc.size(), sg.size());
  for (size_t i = 0; i < sc.size(); ++i) {
    EXPECT_EQ(sc[i].first, sg[i].first);
    ok &= Record(c.name, sc[i].first, Compare(ToHost(sg[i].second), sc[i].second), kFp32);
  }
  EXPECT_EQ((*og)->step_count(), 3);
  EXPECT_TRUE(ok) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, OptimizerParityTest,
    ::testing::Values(OptCase{"sgd", "type: 'sgd' lr: 0.1"},
                      OptCase{"sgd_momentum_wd",
                              "type: 'sgd' lr: 0.1 momentum: 0.9 "
                              "weight_decay: 0.01"},
                      OptCase{"sgd_nesterov", "type: 'sgd' lr: 0.1 momentum: 0.9 nesterov: true"},
                      OptCase{"sgd_nesterov_wd",
                              "type: 'sgd' lr: 0.1 momentum: 0.9 nesterov: "
                              "true weight_decay: 0.001"},
                      OptCase{"adam", "type: 'adam' lr: 0.01 weight_decay: 0.01"},
                      OptCase{"adamw", "type: 'adamw' lr: 0.01 weight_decay: 0.1"}),
    [](const auto& info) { return info.param.name; });

TEST(GradNormParityTest, MatchesCpu) {
  SKIP_UNLESS_PARITY_DEVICE();
  ParamSet pc, pg;
  Declare(&pc);
  Declare(&pg);
  ASSERT_TRUE(pc.Finalize().ok());
  ASSERT_TRUE(pg.Finalize(Gpu()).ok());
  Tensor g = RandomHost(pc.flat_grads().shape(), 9);
  pc.flat_grads().CopyFrom(g);
  pg.flat_grads().CopyFrom(g);
  absl::StatusOr<double> norm = 0.0;
  if (SelfTest()) {
    norm = GradNorm(pg, 0.25f);  // a CPU parameter set
  } else {
    auto backend = BackendFor(Gpu());
    ASSERT_TRUE(backend.ok()) << backend.status();
    norm = (*backend)->GradNorm(pg, 0.25f);
  }
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_TRUE(Record("grad_norm", "norm", Scalar(*norm, GradNorm(pc, 0.25f)), kFp32));
}

}  // namespace
}  // namespace yoke::engine::parity
