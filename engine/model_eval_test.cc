// Evaluation on the liveness plan (engine/model.h): the same logits, bit for
// bit, as evaluation on a buffer per layer, in a fraction of the memory.
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/losses/softmax_cross_entropy.h"
#include "engine/model.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

v1::ModelSpec Zoo(const std::string& name) {
  v1::ModelSpec m;
  m.set_zoo(name);
  return m;
}

Tensor Batch(const Shape& input, int64_t n, uint64_t seed) {
  Shape s = input;
  s.insert(s.begin(), n);
  Tensor x = Tensor::Empty(s);
  testing::FillUniform(x, seed, 0);
  return x;
}

// One SGD step in training mode, so batch norm's running statistics move
// and the training buffers exist beside the evaluation ones.
void TrainStep(Model& m, const Shape& input, int classes) {
  const int n = 4;
  Tensor x = Batch(input, n, 9);
  Tensor y = Tensor::Empty({n}, DType::kI32);
  for (int i = 0; i < n; ++i) y.data<int32_t>()[i] = i % classes;
  LayerContext ctx;
  auto out = m.Forward(x, ctx);
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor dlogits = Tensor::Empty(out->shape());
  SoftmaxCrossEntropy loss;
  ASSERT_TRUE(loss.Compute(*out, y, 1.0f, &dlogits).ok());
  ASSERT_TRUE(m.Backward(dlogits, ctx).ok());
  const Tensor& g = m.params().flat_grads();
  float* v = m.params().flat_values().data<float>();
  for (int64_t i = 0; i < g.numel(); ++i) v[i] -= 0.05f * g.data<float>()[i];
}

// Builds `spec` with the plan (the default) and with YOKE_EVAL_PLAN=0 from
// the same parameters, then alternates training steps with evaluations at
// growing and shrinking batch sizes; the logits must agree bit for bit.
void ExpectPlanChangesNoBit(const v1::ModelSpec& spec, const Shape& input, int classes) {
  auto planned = Model::Create(spec, input, classes);
  setenv("YOKE_EVAL_PLAN", "0", 1);
  auto plain = Model::Create(spec, input, classes);
  unsetenv("YOKE_EVAL_PLAN");
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  (*planned)->params().Initialize(5);
  (*plain)->params().Initialize(5);
  LayerContext eval;
  eval.training = false;
  int round = 0;
  for (int64_t n : {6, 2, 6, 9, 1}) {
    if (round++ % 2 == 0) {
      for (Model* m : {planned->get(), plain->get()}) TrainStep(*m, input, classes);
    }
    Tensor x = Batch(input, n, 100 + n);
    std::vector<std::vector<float>> logits;
    for (Model* m : {planned->get(), plain->get()}) {
      auto out = m->Forward(x, eval);
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->shape(), (Shape{n, classes}));
      logits.emplace_back(out->data<float>(), out->data<float>() + out->numel());
    }
    ASSERT_EQ(logits[0], logits[1]) << spec.zoo() << ": logits differ at batch " << n;
    if (n > 1) {
      // Not vacuous: different examples give different logits.
      EXPECT_NE(std::vector<float>(logits[0].begin(), logits[0].begin() + classes),
                std::vector<float>(logits[0].begin() + classes, logits[0].begin() + 2 * classes));
    }
  }
}

TEST(ModelEvalTest, ResNet20OnThePlanMatchesABufferPerLayer) {
  // Residual joins and ReLUs fused into batch norm.
  ExpectPlanChangesNoBit(Zoo("resnet20"), {32, 32, 3}, 10);
}

TEST(ModelEvalTest, CnnOnThePlanMatchesABufferPerLayer) {
  // A convolution that writes its pool's output (absorbed 2x2 max pool) and
  // dropout, which evaluation skips.
  v1::ModelSpec cnn = Zoo("cnn");
  cnn.set_dropout(0.3f);
  ExpectPlanChangesNoBit(cnn, {28, 28, 1}, 10);
}

TEST(ModelEvalTest, ResNet18WithTheImageNetStemOnThePlanMatchesABufferPerLayer) {
  v1::ModelSpec r = Zoo("resnet18");
  r.set_width(8);
  ExpectPlanChangesNoBit(r, {64, 64, 3}, 7);
}

TEST(ModelEvalTest, EvaluationAllocatesThePlanNotABufferPerLayer) {
  const Shape input = {32, 32, 3};
  const int64_t n = 64;
  auto planned = Model::Create(Zoo("resnet20"), input, 10);
  setenv("YOKE_EVAL_PLAN", "0", 1);
  auto plain = Model::Create(Zoo("resnet20"), input, 10);
  unsetenv("YOKE_EVAL_PLAN");
  ASSERT_TRUE(planned.ok() && plain.ok());
  (*planned)->params().Initialize(1);
  (*plain)->params().Initialize(1);
  LayerContext eval;
  eval.training = false;
  Tensor x = Batch(input, n, 3);
  // What the first evaluation at this size leaves allocated, as the CPU
  // allocator counts it.
  std::vector<int64_t> grew;
  for (Model* m : {planned->get(), plain->get()}) {
    const int64_t before = static_cast<int64_t>(CpuAllocator()->in_use_bytes());
    ASSERT_TRUE(m->Forward(x, eval).ok());
    grew.push_back(static_cast<int64_t>(CpuAllocator()->in_use_bytes()) - before);
  }
  const int64_t plan = (*planned)->EvalActivationBytes(n);
  const int64_t all = (*planned)->ActivationBytes(n);
  EXPECT_GE(grew[0], plan);
  EXPECT_GE(grew[1], all);
  // ResNet-20 keeps 3 of its 32x32x16 activations live at most, of about 60.
  EXPECT_LT(plan * 8, all) << "plan " << plan << " bytes, a buffer per layer " << all;
  EXPECT_LT(grew[0] * 4, grew[1]) << "evaluation grew the heap by " << grew[0]
                                  << " bytes on the plan, " << grew[1] << " without";
  // A second evaluation at a smaller batch allocates nothing.
  Tensor half = Batch(input, n / 2, 4);
  const size_t before = CpuAllocator()->in_use_bytes();
  ASSERT_TRUE((*planned)->Forward(half, eval).ok());
  EXPECT_EQ(CpuAllocator()->in_use_bytes(), before);
}

TEST(ModelEvalTest, BackwardAfterAnEvaluationForwardIsRefused) {
  auto m = Model::Create(Zoo("mlp"), {28, 28, 1}, 10);
  ASSERT_TRUE(m.ok()) << m.status();
  (*m)->params().Initialize(2);
  LayerContext eval;
  eval.training = false;
  auto out = (*m)->Forward(Batch({28, 28, 1}, 3, 1), eval);
  ASSERT_TRUE(out.ok()) << out.status();
  Tensor dlogits = Tensor::Zeros(out->shape());
  const absl::Status s = (*m)->Backward(dlogits, LayerContext());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("evaluation"), std::string::npos) << s;
}

}  // namespace
}  // namespace yoke::engine
