// Activation recomputation (Model::SetRecompute, training.recompute): the
// same training to the bit with far fewer activations kept.
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/losses/softmax_cross_entropy.h"
#include "engine/model.h"
#include "engine/testing/random.h"
#include "engine/zoo/model_zoo.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

struct Run {
  std::vector<std::vector<float>> logits, grads;
  std::vector<float> state;  // batch-norm running statistics at the end
  int64_t held = 0;          // activation bytes held after the first step
};

// `steps` SGD steps of `m` on one batch; with `recompute` the model keeps
// only its segments' outputs.
Run Train(const v1::ModelSpec& spec, const Shape& input, bool recompute, int steps,
          int* segments = nullptr) {
  Run r;
  auto m = Model::Create(spec, input, 4);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return r;
  if (recompute) {
    auto k = (*m)->SetRecompute(true);
    EXPECT_TRUE(k.ok()) << k.status();
    if (segments != nullptr && k.ok()) *segments = *k;
    EXPECT_TRUE((*m)->CheckMemoryPlans().ok()) << (*m)->CheckMemoryPlans();
  }
  (*m)->params().Initialize(13);
  const int n = 8;
  Shape xs = input;
  xs.insert(xs.begin(), n);
  Tensor x = Tensor::Empty(xs);
  testing::FillUniform(x, 7, 0);
  Tensor y = Tensor::Empty({n}, DType::kI32);
  for (int i = 0; i < n; ++i) y.data<int32_t>()[i] = i % 4;
  SoftmaxCrossEntropy loss;
  for (int step = 0; step < steps; ++step) {
    LayerContext ctx;
    ctx.step = step;  // dropout draws a new mask each step
    auto out = (*m)->Forward(x, ctx);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return r;
    r.logits.emplace_back(out->data<float>(), out->data<float>() + out->numel());
    Tensor dlogits = Tensor::Empty(out->shape());
    EXPECT_TRUE(loss.Compute(*out, y, 1.0f / n, &dlogits).ok());
    absl::Status b = (*m)->Backward(dlogits, ctx);
    EXPECT_TRUE(b.ok()) << b;
    if (step == 0) r.held = (*m)->HeldActivationBytes();
    const Tensor& g = (*m)->params().flat_grads();
    r.grads.emplace_back(g.data<float>(), g.data<float>() + g.numel());
    float* v = (*m)->params().flat_values().data<float>();
    for (int64_t i = 0; i < g.numel(); ++i) v[i] -= 0.05f * g.data<float>()[i];
  }
  const Tensor& st = (*m)->params().flat_state();
  r.state.assign(st.data<float>(), st.data<float>() + st.numel());
  return r;
}

void ExpectSameToTheBit(const v1::ModelSpec& spec, const Shape& input, double most_kept) {
  int segments = 0;
  const Run plain = Train(spec, input, false, 3);
  const Run again = Train(spec, input, true, 3, &segments);
  ASSERT_EQ(plain.logits.size(), 3u);
  ASSERT_EQ(again.logits.size(), 3u);
  EXPECT_GT(segments, 0) << "nothing is recomputed";
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(plain.logits[s], again.logits[s]) << "logits differ at step " << s;
    EXPECT_EQ(plain.grads[s], again.grads[s]) << "gradients differ at step " << s;
  }
  // Recomputing batch norm must not update its running statistics again.
  EXPECT_EQ(plain.state, again.state);
  const std::string what = spec.zoo().empty() ? "a layer list" : spec.zoo();
  std::printf("%s: %d segments recomputed; activations held %.1f -> %.1f KiB\n", what.c_str(),
              segments, plain.held / 1024.0, again.held / 1024.0);
  EXPECT_LT(again.held, most_kept * plain.held);
}

TEST(ModelRecomputeTest, ResNet20TrainsTheSameToTheBit) {
  v1::ModelSpec spec;
  spec.set_zoo("resnet20");
  spec.set_width(8);
  // Without recomputation each join already writes over its batch norm's
  // output (Model::ShareJoinBuffers), so what recomputation saves beyond
  // that is less than it was (0.4 before the joins shared).
  ExpectSameToTheBit(spec, {16, 16, 3}, 0.5);
}

TEST(ModelRecomputeTest, ResNet50TrainsTheSameToTheBit) {
  v1::ModelSpec spec;
  spec.set_zoo("resnet50");
  spec.set_width(8);
  ExpectSameToTheBit(spec, {64, 64, 3}, 0.55);
}

v1::LayerSpec L(const std::string& name, const std::vector<std::string>& inputs) {
  v1::LayerSpec l;
  l.set_name(name);
  for (const auto& i : inputs) l.add_inputs(i);
  return l;
}

// Two residual blocks of dense layers with dropout inside: dropout draws
// the same mask when its forward runs again.
TEST(ModelRecomputeTest, DropoutInsideABlockTrainsTheSameToTheBit) {
  v1::ModelSpec spec;
  std::string prev = "input";
  for (int b = 0; b < 2; ++b) {
    const std::string p = "b" + std::to_string(b) + "_";
    auto* d1 = spec.add_layers();
    *d1 = L(p + "d1", {prev});
    d1->mutable_dense()->set_units(32);
    auto* r = spec.add_layers();
    *r = L(p + "relu", {p + "d1"});
    r->mutable_relu();
    auto* drop = spec.add_layers();
    *drop = L(p + "drop", {p + "relu"});
    drop->mutable_dropout()->set_rate(0.4f);
    auto* d2 = spec.add_layers();
    *d2 = L(p + "d2", {p + "drop"});
    d2->mutable_dense()->set_units(32);
    auto* add = spec.add_layers();
    *add = L(p + "add", {p + "d2", p + "d1"});
    add->mutable_add();
    prev = p + "add";
  }
  auto* out = spec.add_layers();
  *out = L("out", {prev});
  out->mutable_dense()->set_units(4);
  ExpectSameToTheBit(spec, {6}, 0.8);
}

// The plan's own checks hold for every model of the zoo, and what a
// training step holds is what the plan says it keeps.
TEST(ModelRecomputeTest, EveryZooModelsPlanChecksOut) {
  for (const std::string& name : ZooNames()) {
    SCOPED_TRACE(name);
    v1::ModelSpec spec;
    spec.set_zoo(name);
    const bool image = name != "mlp";
    const Shape input = !image          ? Shape{28, 28, 1}
                        : name == "cnn" ? Shape{28, 28, 1}
                                        : Shape{32, 32, 3};
    auto m = Model::Create(spec, input, 10);
    ASSERT_TRUE(m.ok()) << m.status();
    const int64_t kept = (*m)->ActivationBytes(4);
    ASSERT_TRUE((*m)->SetRecompute(true).ok());
    EXPECT_TRUE((*m)->CheckMemoryPlans().ok()) << (*m)->CheckMemoryPlans();
    EXPECT_LE((*m)->ActivationBytes(4), kept);
    (*m)->params().Initialize(1);
    Shape xs = input;
    xs.insert(xs.begin(), 4);
    Tensor x = Tensor::Empty(xs);
    testing::FillUniform(x, 2, 0);
    LayerContext ctx;
    auto out = (*m)->Forward(x, ctx);
    ASSERT_TRUE(out.ok()) << out.status();
    Tensor d = Tensor::Empty(out->shape());
    d.SetZero();
    ASSERT_TRUE((*m)->Backward(d, ctx).ok());
    EXPECT_EQ((*m)->HeldActivationBytes(), (*m)->ActivationBytes(4));
  }
}

TEST(ModelRecomputeTest, RefusesSeveralActivationSets) {
  v1::ModelSpec spec;
  spec.set_zoo("resnet20");
  spec.set_width(8);
  auto m = Model::Create(spec, {16, 16, 3}, 4);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE((*m)->SetRecompute(true).ok());
  EXPECT_EQ((*m)->SetActivationSets(2).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*m)->SetRecompute(false).ok());
  EXPECT_TRUE((*m)->SetActivationSets(2).ok());
  EXPECT_EQ((*m)->SetRecompute(true).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace yoke::engine
