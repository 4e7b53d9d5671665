// Activation recomputation (Model::SetRecompute, training.recompute; and
// Model::SetRecomputeBatchNorm, training.recompute_batch_norm): the same
// training to the bit with fewer activations kept.
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

// What a training Forward keeps: every output, the segments' last outputs
// (training.recompute), or all but batch norm's (recompute_batch_norm).
enum class Keep { kAll, kSegmentEnds, kBatchNormInputs };

// `steps` SGD steps of `m` on one batch, keeping what `keep` says;
// `recomputed` gets the segments or outputs recomputed.
Run Train(const v1::ModelSpec& spec, const Shape& input, Keep keep, int steps,
          int* recomputed = nullptr) {
  Run r;
  auto m = Model::Create(spec, input, 4);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return r;
  if (keep != Keep::kAll) {
    auto k =
        keep == Keep::kSegmentEnds ? (*m)->SetRecompute(true) : (*m)->SetRecomputeBatchNorm(true);
    EXPECT_TRUE(k.ok()) << k.status();
    if (recomputed != nullptr && k.ok()) *recomputed = *k;
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

// Returns the activation bytes held without and with `keep`.
std::pair<int64_t, int64_t> ExpectSameToTheBit(const v1::ModelSpec& spec, const Shape& input,
                                               double most_kept, Keep keep = Keep::kSegmentEnds) {
  int segments = 0;
  const Run plain = Train(spec, input, Keep::kAll, 3);
  const Run again = Train(spec, input, keep, 3, &segments);
  EXPECT_EQ(plain.logits.size(), 3u);
  EXPECT_EQ(again.logits.size(), 3u);
  if (plain.logits.size() != 3u || again.logits.size() != 3u) return {0, 0};
  EXPECT_GT(segments, 0) << "nothing is recomputed";
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(plain.logits[s], again.logits[s]) << "logits differ at step " << s;
    EXPECT_EQ(plain.grads[s], again.grads[s]) << "gradients differ at step " << s;
  }
  // Recomputing batch norm must not update its running statistics again.
  EXPECT_EQ(plain.state, again.state);
  const std::string what = spec.zoo().empty() ? "a layer list" : spec.zoo();
  std::printf("%s: %d %s recomputed; activations held %.1f -> %.1f KiB\n", what.c_str(), segments,
              keep == Keep::kSegmentEnds ? "segments" : "batch norm outputs", plain.held / 1024.0,
              again.held / 1024.0);
  EXPECT_LT(again.held, most_kept * plain.held);
  return {plain.held, again.held};
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

// The plans' own checks hold for every model of the zoo, under both kinds
// of recomputation, and what a training step holds is what the model says
// it keeps.
TEST(ModelRecomputeTest, EveryZooModelsPlanChecksOut) {
  for (const std::string& name : ZooNames()) {
    for (const Keep keep : {Keep::kSegmentEnds, Keep::kBatchNormInputs}) {
      SCOPED_TRACE(name + (keep == Keep::kSegmentEnds ? " recompute" : " recompute_batch_norm"));
      v1::ModelSpec spec;
      spec.set_zoo(name);
      const bool image = name != "mlp";
      const Shape input = !image          ? Shape{28, 28, 1}
                          : name == "cnn" ? Shape{28, 28, 1}
                                          : Shape{32, 32, 3};
      auto m = Model::Create(spec, input, 10);
      ASSERT_TRUE(m.ok()) << m.status();
      const int64_t kept = (*m)->ActivationBytes(4);
      ASSERT_TRUE((keep == Keep::kSegmentEnds ? (*m)->SetRecompute(true)
                                              : (*m)->SetRecomputeBatchNorm(true))
                      .ok());
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
}

// Batch norm applied again in backward. In ResNet-20 (width w, 16x16
// inputs, 8 examples) the outputs that go are the first batch norm's of
// each of the 9 blocks (with its ReLU: read by the second convolution's
// backward), the stem's (read by the first block's convolution) and the 2
// downsampling shortcuts' batch norms (read by no backward: the joins read
// neither input). The second batch norm of each block stays, as the buffer
// its join writes over. They share two slots of the largest size (16x16xw):
// the stem's output lives through the first block, beside that block's own.
TEST(ModelRecomputeTest, ResNet20AppliesBatchNormAgainToTheBit) {
  v1::ModelSpec spec;
  spec.set_zoo("resnet20");
  spec.set_width(8);
  const int64_t w = 8, n = 8;
  const auto [plain, held] = ExpectSameToTheBit(spec, {16, 16, 3}, 0.9, Keep::kBatchNormInputs);
  const int64_t stage1 = 16 * 16 * w, stage2 = 8 * 8 * 2 * w, stage3 = 4 * 4 * 4 * w;
  const int64_t gone = 3 * stage1 + 3 * stage2 + 3 * stage3 + stage1 + stage2 + stage3;
  const int64_t slots = 2 * stage1;
  EXPECT_EQ(plain - held, (gone - slots) * n * 4);
}

TEST(ModelRecomputeTest, ResNet50AppliesBatchNormAgainToTheBit) {
  v1::ModelSpec spec;
  spec.set_zoo("resnet50");
  spec.set_width(8);
  ExpectSameToTheBit(spec, {64, 64, 3}, 0.9, Keep::kBatchNormInputs);
}

// A batch norm whose output is the model's: kept (the loss reads it), so
// there is nothing to recompute and training is unchanged.
TEST(ModelRecomputeTest, BatchNormAtTheEndIsKept) {
  v1::ModelSpec spec;
  auto* d = spec.add_layers();
  *d = L("d", {"input"});
  d->mutable_dense()->set_units(4);
  auto* bn = spec.add_layers();
  *bn = L("bn", {"d"});
  bn->mutable_batch_norm();
  auto m = Model::Create(spec, {6}, 4);
  ASSERT_TRUE(m.ok()) << m.status();
  auto k = (*m)->SetRecomputeBatchNorm(true);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*k, 0);
}

TEST(ModelRecomputeTest, RecomputeBatchNormRefusesWhatItCannotServe) {
  v1::ModelSpec spec;
  spec.set_zoo("resnet20");
  spec.set_width(8);
  auto m = Model::Create(spec, {16, 16, 3}, 4);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE((*m)->SetRecomputeBatchNorm(true).ok());
  EXPECT_EQ((*m)->SetActivationSets(2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*m)->SetRecompute(true).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*m)->SetRecomputeBatchNorm(false).ok());
  ASSERT_TRUE((*m)->SetRecompute(true).ok());
  EXPECT_EQ((*m)->SetRecomputeBatchNorm(true).status().code(),
            absl::StatusCode::kFailedPrecondition);
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
