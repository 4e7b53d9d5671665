// Host tests of the CUDA optimizers' functors (math/optim.h): run with
// HostForEach on random data, they must give the CPU optimizers'
// (engine/optim/) parameters and state bit for bit over several steps, and
// the two-level sum of squares must give GradNorm.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/kernels/cuda/math/optim.h"
#include "engine/optim/optimizer.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

// A finalized CPU ParamSet with odd-sized parameters (padding between them).
std::unique_ptr<ParamSet> MakeParams(const std::vector<Shape>& shapes, uint64_t seed) {
  auto p = std::make_unique<ParamSet>();
  for (size_t k = 0; k < shapes.size(); ++k) {
    p->Declare("l/p" + std::to_string(k), shapes[k], Init::Constant(0));
  }
  EXPECT_TRUE(p->Finalize().ok());
  // Random values in every parameter; the padding stays 0 as on a real set.
  for (size_t k = 0; k < shapes.size(); ++k) {
    testing::FillUniform(p->value(static_cast<int>(k)), seed, k, -1.0f, 1.0f);
  }
  return p;
}

void RandomGrads(ParamSet* p, size_t count, uint64_t seed) {
  for (size_t k = 0; k < count; ++k) {
    testing::FillUniform(p->grad(static_cast<int>(k)), seed, 100 + k, -2.0f, 2.0f);
  }
}

std::vector<float> Copy(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

void ExpectBitwise(const std::vector<float>& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want.data<float>()[i], 4);
    ASSERT_EQ(a, b) << what << " differs at " << i << ": " << got[i] << " vs "
                    << want.data<float>()[i];
  }
}

v1::OptimizerSpec Spec(const std::string& type, float momentum, bool nesterov, float wd) {
  v1::OptimizerSpec s;
  s.set_type(type);
  s.set_lr(0.05f);
  s.set_momentum(momentum);
  s.set_nesterov(nesterov);
  s.set_weight_decay(wd);
  if (type != "sgd") {
    s.set_beta1(0.85f);
    s.set_beta2(0.99f);
    s.set_epsilon(1e-6f);
  }
  return s;
}

const std::vector<Shape> kShapes = {{3}, {5, 7}, {1}, {2, 3, 3}};
constexpr float kLr[] = {0.05f, 0.1f, 0.013f, 0.2f, 0.07f};
constexpr float kGradScale = 0.37f;  // a 1 / (global batch) style factor

using State = std::vector<std::vector<float>>;

// Runs the CPU optimizer of `spec` and the functor (through `step`, which
// updates p and the state arrays in the order of State()) for several steps
// on the same data.
template <typename StepFn>
void CompareWithCpu(const v1::OptimizerSpec& spec, const std::vector<std::string>& state_names,
                    StepFn step) {
  std::unique_ptr<ParamSet> cpu = MakeParams(kShapes, 7);
  auto opt = CreateOptimizer(spec, cpu.get());
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<float> p = Copy(cpu->flat_values());
  const int64_t n = static_cast<int64_t>(p.size());
  State state(state_names.size(), std::vector<float>(p.size(), 0.0f));
  for (int t = 0; t < 5; ++t) {
    RandomGrads(cpu.get(), kShapes.size(), 11 + t);
    std::vector<float> g = Copy(cpu->flat_grads());
    ASSERT_TRUE((*opt)->Step(kLr[t], kGradScale).ok());
    step(kLr[t], int64_t{t + 1}, n, p.data(), g.data(), &state);
    ExpectBitwise(p, cpu->flat_values(), spec.type() + " params at step " + std::to_string(t + 1));
    auto named = (*opt)->State();
    ASSERT_EQ(named.size(), state_names.size());
    for (size_t k = 0; k < named.size(); ++k) {
      EXPECT_EQ(named[k].first, state_names[k]);
      ExpectBitwise(state[k], named[k].second, spec.type() + " " + named[k].first);
    }
  }
}

void RunSgd(float momentum, bool nesterov, float wd) {
  SCOPED_TRACE(::testing::Message()
               << "momentum " << momentum << " nesterov " << nesterov << " wd " << wd);
  std::vector<std::string> names;
  if (momentum > 0) names.push_back("momentum");
  CompareWithCpu(Spec("sgd", momentum, nesterov, wd), names,
                 [&](float lr, int64_t, int64_t n, float* p, const float* g, State* state) {
                   SgdStepFn f{p, g, nullptr, lr, kGradScale, momentum, wd, SgdStepFn::kPlain};
                   if (momentum > 0) {
                     f.v = (*state)[0].data();
                     f.mode = nesterov ? SgdStepFn::kNesterov : SgdStepFn::kMomentum;
                   }
                   HostForEach(n, f);
                 });
}

TEST(CudaOptimMathTest, SgdPlainEqualsCpu) {
  RunSgd(0.0f, false, 0.0f);
  RunSgd(0.0f, false, 0.01f);
  RunSgd(0.0f, true, 0.01f);  // nesterov without momentum is plain SGD, as on the CPU
}

TEST(CudaOptimMathTest, SgdMomentumEqualsCpu) {
  RunSgd(0.9f, false, 0.0f);
  RunSgd(0.9f, false, 5e-4f);
}

TEST(CudaOptimMathTest, SgdNesterovEqualsCpu) {
  RunSgd(0.9f, true, 0.0f);
  RunSgd(0.8f, true, 5e-4f);
}

void RunAdam(bool decoupled, float wd) {
  SCOPED_TRACE(::testing::Message() << "decoupled " << decoupled << " wd " << wd);
  const v1::OptimizerSpec spec = Spec(decoupled ? "adamw" : "adam", 0.0f, false, wd);
  CompareWithCpu(spec, {"exp_avg", "exp_avg_sq"},
                 [&](float lr, int64_t t, int64_t n, float* p, const float* g, State* state) {
                   AdamStepFn f{p,
                                g,
                                (*state)[0].data(),
                                (*state)[1].data(),
                                kGradScale,
                                spec.beta1(),
                                spec.beta2(),
                                spec.epsilon(),
                                AdamScalarsFor(lr, spec.beta1(), spec.beta2(), wd, decoupled, t)};
                   HostForEach(n, f);
                 });
}

TEST(CudaOptimMathTest, AdamEqualsCpu) {
  RunAdam(false, 0.0f);
  RunAdam(false, 0.01f);
}

TEST(CudaOptimMathTest, AdamWEqualsCpu) {
  RunAdam(true, 0.0f);
  RunAdam(true, 0.05f);
}

// The two-level sum of squares against GradNorm. Both sum in double in
// different orders (GradNorm's OpenMP reduction has no fixed order), so they
// agree to double rounding, far inside 1e-12 relative.
TEST(CudaOptimMathTest, SumOfSquaresEqualsGradNorm) {
  for (const std::vector<Shape>& shapes :
       std::vector<std::vector<Shape>>{{{1}},
                                       {{3}, {5}},
                                       {{kNormMaxPartials}},
                                       {{kNormMaxPartials + 1}, {3, 7}},
                                       {{3 * kNormMaxPartials + 5}}}) {
    std::unique_ptr<ParamSet> p = MakeParams(shapes, 3);
    RandomGrads(p.get(), shapes.size(), 5);
    const Tensor& g = p->flat_grads();
    const int64_t chunks = NormPartials(g.numel());
    std::vector<double> partial(chunks, -1.0);
    double total = -1.0;
    HostForEach(chunks, SumSquaresChunkFn{g.data<float>(), g.numel(), chunks, partial.data()});
    HostForEach(1, SumChunksFn{partial.data(), chunks, &total});
    const double want = GradNorm(*p, kGradScale);
    const double got = static_cast<double>(kGradScale) * std::sqrt(total);
    EXPECT_NEAR(got, want, 1e-12 * want) << "elements " << g.numel();
    EXPECT_GT(want, 0.0);
  }
}

}  // namespace
}  // namespace yoke::engine::cuda
