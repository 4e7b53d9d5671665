// The memory plans (engine/model.h): evaluation and the activation gradients
// on buffers shared by liveness give the same logits and gradients, bit for
// bit, as a buffer per layer (YOKE_MEMORY_PLAN=0), in a fraction of the
// memory, as the CPU allocator counts it.
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/allocator.h"
#include "engine/losses/softmax_cross_entropy.h"
#include "engine/model.h"
#include "engine/testing/random.h"
#include "engine/zoo/model_zoo.h"
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

// `spec` built twice, with the memory plans and with YOKE_MEMORY_PLAN=0,
// both with the parameters of `seed`; nulls (and a failure) if either fails.
std::pair<std::unique_ptr<Model>, std::unique_ptr<Model>> PlannedAndPlain(const v1::ModelSpec& spec,
                                                                          const Shape& input,
                                                                          int classes,
                                                                          uint64_t seed) {
  auto planned = Model::Create(spec, input, classes);
  setenv("YOKE_MEMORY_PLAN", "0", 1);
  auto plain = Model::Create(spec, input, classes);
  unsetenv("YOKE_MEMORY_PLAN");
  EXPECT_TRUE(planned.ok()) << planned.status();
  EXPECT_TRUE(plain.ok()) << plain.status();
  if (!planned.ok() || !plain.ok()) return {};
  (*planned)->params().Initialize(seed);
  (*plain)->params().Initialize(seed);
  return {std::move(planned).value(), std::move(plain).value()};
}

// One SGD step in training mode, so batch norm's running statistics move
// and the training buffers exist beside the evaluation ones. Returns the
// logits and the parameter gradients.
std::vector<float> TrainStep(Model& m, const Shape& input, int classes) {
  const int n = 4;
  Tensor x = Batch(input, n, 9);
  Tensor y = Tensor::Empty({n}, DType::kI32);
  for (int i = 0; i < n; ++i) y.data<int32_t>()[i] = i % classes;
  LayerContext ctx;
  auto out = m.Forward(x, ctx);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  std::vector<float> seen(out->data<float>(), out->data<float>() + out->numel());
  Tensor dlogits = Tensor::Empty(out->shape());
  SoftmaxCrossEntropy loss;
  EXPECT_TRUE(loss.Compute(*out, y, 1.0f, &dlogits).ok());
  const absl::Status s = m.Backward(dlogits, ctx);
  EXPECT_TRUE(s.ok()) << s;
  const Tensor& g = m.params().flat_grads();
  seen.insert(seen.end(), g.data<float>(), g.data<float>() + g.numel());
  float* v = m.params().flat_values().data<float>();
  for (int64_t i = 0; i < g.numel(); ++i) v[i] -= 0.05f * g.data<float>()[i];
  return seen;
}

// Builds `spec` with the plans (the default) and with YOKE_MEMORY_PLAN=0 from
// the same parameters, then alternates training steps with evaluations at
// growing and shrinking batch sizes; logits and gradients must agree bit for
// bit.
void ExpectPlanChangesNoBit(const v1::ModelSpec& spec, const Shape& input, int classes) {
  auto [planned, plain] = PlannedAndPlain(spec, input, classes, 5);
  ASSERT_TRUE(planned && plain);
  LayerContext eval;
  eval.training = false;
  int round = 0;
  for (int64_t n : {6, 2, 6, 9, 1}) {
    if (round++ % 2 == 0) {
      const std::vector<float> a = TrainStep(*planned, input, classes);
      const std::vector<float> b = TrainStep(*plain, input, classes);
      ASSERT_FALSE(a.empty());
      ASSERT_EQ(a, b) << spec.zoo() << ": a training step's logits or gradients differ";
    }
    Tensor x = Batch(input, n, 100 + n);
    std::vector<std::vector<float>> logits;
    for (Model* m : {planned.get(), plain.get()}) {
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

TEST(ModelMemoryTest, MlpOnThePlanMatchesABufferPerLayer) {
  v1::ModelSpec mlp = Zoo("mlp");
  mlp.set_dropout(0.2f);
  ExpectPlanChangesNoBit(mlp, {28, 28, 1}, 10);
}

TEST(ModelMemoryTest, ResNet20OnThePlanMatchesABufferPerLayer) {
  // Residual joins and ReLUs fused into batch norm.
  ExpectPlanChangesNoBit(Zoo("resnet20"), {32, 32, 3}, 10);
}

TEST(ModelMemoryTest, CnnOnThePlanMatchesABufferPerLayer) {
  // A convolution that writes its pool's output (absorbed 2x2 max pool) and
  // dropout, which evaluation skips.
  v1::ModelSpec cnn = Zoo("cnn");
  cnn.set_dropout(0.3f);
  ExpectPlanChangesNoBit(cnn, {28, 28, 1}, 10);
}

TEST(ModelMemoryTest, ResNet18WithTheImageNetStemOnThePlanMatchesABufferPerLayer) {
  v1::ModelSpec r = Zoo("resnet18");
  r.set_width(8);
  ExpectPlanChangesNoBit(r, {64, 64, 3}, 7);
}

v1::LayerSpec Layer(const std::string& name, const std::vector<std::string>& inputs) {
  v1::LayerSpec l;
  l.set_name(name);
  for (const auto& i : inputs) l.add_inputs(i);
  return l;
}

TEST(ModelMemoryTest, NarrowResNet50OnThePlanMatchesABufferPerLayer) {
  // Bottleneck blocks with projection shortcuts, the ImageNet stem.
  v1::ModelSpec r = Zoo("resnet50");
  r.set_width(4);
  ExpectPlanChangesNoBit(r, {64, 64, 3}, 5);
}

// Every zoo model, at both stems: neither plan hands one slot to two live
// buffers or a buffer to a slot too small for it.
TEST(ModelMemoryTest, EveryZooModelsPlansPassTheChecker) {
  for (const std::string& name : ZooNames()) {
    for (const Shape& input : {Shape{28, 28, 1}, Shape{32, 32, 3}, Shape{64, 64, 3}}) {
      v1::ModelSpec spec = Zoo(name);
      if (name.rfind("resnet", 0) == 0) spec.set_width(4);
      auto m = Model::Create(spec, input, 10);
      ASSERT_TRUE(m.ok()) << name << ": " << m.status();
      const absl::Status s = (*m)->CheckMemoryPlans();
      EXPECT_TRUE(s.ok()) << name << " on " << ShapeString(input) << ": " << s;
      EXPECT_LT((*m)->EvalActivationBytes(1), (*m)->ActivationBytes(1)) << name;
      EXPECT_LT((*m)->GradientBytes(1, true), (*m)->GradientBytes(1, false)) << name;
    }
  }
}

TEST(ModelMemoryTest, AThreeWayJoinOnThePlanMatchesABufferPerLayer) {
  // r feeds d2, d3 and the add, so its gradient has three contributions: two
  // go through planned scratch buffers. d2 feeds the add and d4.
  v1::ModelSpec m;
  *m.add_layers() = Layer("d1", {"input"});
  m.mutable_layers(0)->mutable_dense()->set_units(8);
  *m.add_layers() = Layer("r", {"d1"});
  m.mutable_layers(1)->mutable_relu();
  *m.add_layers() = Layer("d2", {"r"});
  m.mutable_layers(2)->mutable_dense()->set_units(8);
  *m.add_layers() = Layer("d3", {"r"});
  m.mutable_layers(3)->mutable_dense()->set_units(8);
  *m.add_layers() = Layer("s", {"r", "d2", "d3"});
  m.mutable_layers(4)->mutable_add();
  *m.add_layers() = Layer("d4", {"d2"});
  m.mutable_layers(5)->mutable_dense()->set_units(8);
  *m.add_layers() = Layer("s2", {"s", "d4"});
  m.mutable_layers(6)->mutable_add();
  *m.add_layers() = Layer("t", {"s2"});
  m.mutable_layers(7)->mutable_tanh();
  *m.add_layers() = Layer("out", {"t"});
  m.mutable_layers(8)->mutable_dense()->set_units(4);
  ExpectPlanChangesNoBit(m, {6}, 4);
}

// Bytes the CPU allocator gains over one training Forward of `m`.
int64_t TrainingForwardGrowth(Model& m, const Tensor& x) {
  const int64_t before = static_cast<int64_t>(CpuAllocator()->in_use_bytes());
  LayerContext ctx;
  auto out = m.Forward(x, ctx);
  EXPECT_TRUE(out.ok()) << out.status();
  return static_cast<int64_t>(CpuAllocator()->in_use_bytes()) - before;
}

TEST(ModelMemoryTest, EachResidualJoinWritesOverItsBatchNormsOutput) {
  // ResNet-20's 9 joins each add the block's last batch norm to the
  // shortcut; nothing else reads that batch norm's output, and its backward
  // reads its input, so the join's sum goes over it. Per example, the
  // blocks' outputs are 32x32x16, 16x16x32 and 8x8x64, 3 blocks each.
  const Shape input = {32, 32, 3};
  const int64_t n = 8;
  auto [planned, plain] = PlannedAndPlain(Zoo("resnet20"), input, 10, 1);
  ASSERT_TRUE(planned && plain);
  const Tensor x = Batch(input, n, 3);
  const int64_t on_plan = TrainingForwardGrowth(*planned, x);
  const int64_t per_layer = TrainingForwardGrowth(*plain, x);
  const int64_t joins = 3 * (32 * 32 * 16 + 16 * 16 * 32 + 8 * 8 * 64) * n * 4;
  EXPECT_EQ(per_layer - on_plan, joins);
  EXPECT_EQ(on_plan, planned->ActivationBytes(n));
  EXPECT_EQ(planned->HeldActivationBytes(), planned->ActivationBytes(n));
  ExpectPlanChangesNoBit(Zoo("resnet20"), input, 10);
}

TEST(ModelMemoryTest, AJoinKeepsAnInputThatAnotherLayerReads) {
  // bn feeds the join and c2, whose backward reads bn's output for its
  // weights' gradient: the join may not write over it (c2 would learn from
  // the sum), and c2's output, read by nothing but the join, takes the sum.
  v1::ModelSpec m;
  *m.add_layers() = Layer("c1", {"input"});
  m.mutable_layers(0)->mutable_conv2d()->set_filters(4);
  m.mutable_layers(0)->mutable_conv2d()->set_kernel(3);
  *m.add_layers() = Layer("bn", {"c1"});
  m.mutable_layers(1)->mutable_batch_norm();
  *m.add_layers() = Layer("c2", {"bn"});
  m.mutable_layers(2)->mutable_conv2d()->set_filters(4);
  m.mutable_layers(2)->mutable_conv2d()->set_kernel(3);
  *m.add_layers() = Layer("j", {"bn", "c2"});
  m.mutable_layers(3)->mutable_add();
  *m.add_layers() = Layer("f", {"j"});
  m.mutable_layers(4)->mutable_flatten();
  *m.add_layers() = Layer("out", {"f"});
  m.mutable_layers(5)->mutable_dense()->set_units(3);
  const Shape input = {6, 6, 2};
  ExpectPlanChangesNoBit(m, input, 3);
  auto [planned, plain] = PlannedAndPlain(m, input, 3, 2);
  ASSERT_TRUE(planned && plain);
  const Tensor x = Batch(input, 5, 4);
  // One 6x6x4 output fewer: c2's buffer holds the join.
  EXPECT_EQ(TrainingForwardGrowth(*plain, x) - TrainingForwardGrowth(*planned, x),
            6 * 6 * 4 * 5 * 4);
}

TEST(ModelMemoryTest, TrainingAllocatesThePlannedGradientsAndNothingAfterTheFirstStep) {
  const Shape input = {32, 32, 3};
  const int64_t n = 16;
  auto [planned, plain] = PlannedAndPlain(Zoo("resnet20"), input, 10, 1);
  ASSERT_TRUE(planned && plain);
  Tensor x = Batch(input, n, 3);
  Tensor y = Tensor::Empty({n}, DType::kI32);
  for (int i = 0; i < n; ++i) y.data<int32_t>()[i] = i % 10;
  Tensor dlogits = Tensor::Empty({n, 10});
  SoftmaxCrossEntropy loss;
  LayerContext ctx;
  // What the first Backward leaves allocated beyond the Forward's buffers.
  std::vector<int64_t> grew;
  for (Model* m : {planned.get(), plain.get()}) {
    auto out = m->Forward(x, ctx);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(loss.Compute(*out, y, 1.0f, &dlogits).ok());
    const int64_t before = static_cast<int64_t>(CpuAllocator()->in_use_bytes());
    ASSERT_TRUE(m->Backward(dlogits, ctx).ok());
    grew.push_back(static_cast<int64_t>(CpuAllocator()->in_use_bytes()) - before);
  }
  const int64_t plan = planned->GradientBytes(n, true);
  const int64_t all = planned->GradientBytes(n, false);
  EXPECT_GE(grew[0], plan);
  EXPECT_GE(grew[1], all);
  EXPECT_LT(plan * 8, all) << "plan " << plan << " bytes, a buffer per layer " << all;
  EXPECT_LT(grew[0] * 4, grew[1]) << "the first Backward grew the heap by " << grew[0]
                                  << " bytes on the plan, " << grew[1] << " without";
  // The second step allocates nothing, residual joins included.
  const size_t before = CpuAllocator()->in_use_bytes();
  auto out = planned->Forward(x, ctx);
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(loss.Compute(*out, y, 1.0f, &dlogits).ok());
  ASSERT_TRUE(planned->Backward(dlogits, ctx).ok());
  EXPECT_EQ(CpuAllocator()->in_use_bytes(), before);
}

TEST(ModelMemoryTest, EvaluationAllocatesThePlanNotABufferPerLayer) {
  const Shape input = {32, 32, 3};
  const int64_t n = 64;
  auto [planned, plain] = PlannedAndPlain(Zoo("resnet20"), input, 10, 1);
  ASSERT_TRUE(planned && plain);
  LayerContext eval;
  eval.training = false;
  Tensor x = Batch(input, n, 3);
  // What the first evaluation at this size leaves allocated, as the CPU
  // allocator counts it.
  std::vector<int64_t> grew;
  for (Model* m : {planned.get(), plain.get()}) {
    const int64_t before = static_cast<int64_t>(CpuAllocator()->in_use_bytes());
    ASSERT_TRUE(m->Forward(x, eval).ok());
    grew.push_back(static_cast<int64_t>(CpuAllocator()->in_use_bytes()) - before);
  }
  const int64_t plan = planned->EvalActivationBytes(n);
  const int64_t all = planned->ActivationBytes(n);
  EXPECT_GE(grew[0], plan);
  EXPECT_GE(grew[1], all);
  // ResNet-20 keeps 3 of its 32x32x16 activations live at most, of about 60.
  EXPECT_LT(plan * 8, all) << "plan " << plan << " bytes, a buffer per layer " << all;
  EXPECT_LT(grew[0] * 4, grew[1]) << "evaluation grew the heap by " << grew[0]
                                  << " bytes on the plan, " << grew[1] << " without";
  // A second evaluation at a smaller batch allocates nothing.
  Tensor half = Batch(input, n / 2, 4);
  const size_t before = CpuAllocator()->in_use_bytes();
  ASSERT_TRUE(planned->Forward(half, eval).ok());
  EXPECT_EQ(CpuAllocator()->in_use_bytes(), before);
}

TEST(ModelMemoryTest, BackwardAfterAnEvaluationForwardIsRefused) {
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
