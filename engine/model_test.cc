#include "engine/model.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/losses/softmax_cross_entropy.h"
#include "engine/testing/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

v1::LayerSpec L(const std::string& name, const std::vector<std::string>& inputs) {
  v1::LayerSpec l;
  l.set_name(name);
  for (const auto& i : inputs) l.add_inputs(i);
  return l;
}

// input(6) -> a = tanh(dense5) ; b = tanh(dense5(a)) ; c = a + b ; logits = dense3(c)
// `a` feeds two consumers, so its gradient is the sum of two paths.
v1::ModelSpec ResidualSpec() {
  v1::ModelSpec m;
  auto* d1 = m.add_layers();
  *d1 = L("d1", {"input"});
  d1->mutable_dense()->set_units(5);
  auto* a = m.add_layers();
  *a = L("a", {"d1"});
  a->mutable_tanh();
  auto* d2 = m.add_layers();
  *d2 = L("d2", {"a"});
  d2->mutable_dense()->set_units(5);
  auto* b = m.add_layers();
  *b = L("b", {"d2"});
  b->mutable_tanh();
  auto* c = m.add_layers();
  *c = L("c", {"a", "b"});
  c->mutable_add();
  auto* out = m.add_layers();
  *out = L("out", {"c"});
  out->mutable_dense()->set_units(3);
  return m;
}

// Every parameter's gradient against central differences of the loss.
void ExpectGradientsMatchFiniteDifferences(const v1::ModelSpec& spec) {
  auto m = Model::Create(spec, {6}, 3);
  ASSERT_TRUE(m.ok()) << m.status();
  Model& model = **m;
  model.params().Initialize(3);
  const int n = 4;
  Tensor x = Tensor::Empty({n, 6});
  testing::FillUniform(x, 5, 0);
  Tensor y = Tensor::Empty({n}, DType::kI32);
  for (int i = 0; i < n; ++i) y.data<int32_t>()[i] = i % 3;
  SoftmaxCrossEntropy loss;
  LayerContext ctx;

  auto eval = [&]() -> double {
    auto logits = model.Forward(x, ctx);
    EXPECT_TRUE(logits.ok());
    return loss.Compute(*logits, y, 0, nullptr)->loss_sum;
  };
  auto logits = model.Forward(x, ctx);
  ASSERT_TRUE(logits.ok());
  Tensor dlogits = Tensor::Empty(logits->shape());
  ASSERT_TRUE(loss.Compute(*logits, y, 1.0f, &dlogits).ok());
  ASSERT_TRUE(model.Backward(dlogits, ctx).ok());
  const Tensor& g = model.params().flat_grads();
  std::vector<float> analytic(g.data<float>(), g.data<float>() + g.numel());

  float* v = model.params().flat_values().data<float>();
  const float h = 1e-2f;
  int checked = 0;
  for (const auto& e : model.params().entries()) {
    for (int64_t i = 0; i < NumElements(e.shape); ++i) {
      int64_t k = e.offset + i;
      float saved = v[k];
      v[k] = saved + h;
      double lp = eval();
      v[k] = saved - h;
      double lm = eval();
      v[k] = saved;
      double numeric = (lp - lm) / (2 * h);
      EXPECT_NEAR(analytic[k], numeric, 2e-3 * std::max(1.0, std::fabs(numeric)))
          << e.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, model.params().num_parameters());
}

TEST(ModelTest, ResidualGraphGradientsMatchFiniteDifferences) {
  ExpectGradientsMatchFiniteDifferences(ResidualSpec());
  setenv("YOKE_MEMORY_PLAN", "0", 1);  // a buffer per layer, scratch per step
  ExpectGradientsMatchFiniteDifferences(ResidualSpec());
  unsetenv("YOKE_MEMORY_PLAN");
}

// A layer that reads one node twice: s = a + a sends two gradients to a.
TEST(ModelTest, ALayerReadingOneNodeTwiceSendsItBothGradients) {
  v1::ModelSpec m;
  *m.add_layers() = L("d1", {"input"});
  m.mutable_layers(0)->mutable_dense()->set_units(5);
  *m.add_layers() = L("a", {"d1"});
  m.mutable_layers(1)->mutable_tanh();
  *m.add_layers() = L("s", {"a", "a"});
  m.mutable_layers(2)->mutable_add();
  *m.add_layers() = L("out", {"s"});
  m.mutable_layers(3)->mutable_dense()->set_units(3);
  ExpectGradientsMatchFiniteDifferences(m);
  setenv("YOKE_MEMORY_PLAN", "0", 1);
  ExpectGradientsMatchFiniteDifferences(m);
  unsetenv("YOKE_MEMORY_PLAN");
}

// The backward hook reports each parameter once, right after its layer's
// Backward (layers in reverse order), and the gradient it announces is final:
// the hook sees the same values the finished Backward leaves behind.
TEST(ModelTest, GradReadyHookReportsEachParameterWhenFinal) {
  auto m = Model::Create(ResidualSpec(), {6}, 3);
  ASSERT_TRUE(m.ok()) << m.status();
  Model& model = **m;
  model.params().Initialize(3);
  Tensor x = Tensor::Empty({2, 6});
  for (int i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.1f * i - 0.5f;
  LayerContext ctx;
  auto logits = model.Forward(x, ctx);
  ASSERT_TRUE(logits.ok());
  Tensor dlogits = Tensor::Empty(logits->shape());
  for (int i = 0; i < dlogits.numel(); ++i) dlogits.data<float>()[i] = 0.2f * i - 0.3f;

  const auto& entries = model.params().entries();
  std::vector<int> order;
  std::vector<std::vector<float>> seen(entries.size());
  ASSERT_TRUE(model
                  .Backward(dlogits, ctx,
                            [&](int id) {
                              order.push_back(id);
                              Tensor g = model.params().grad(id);
                              seen[id].assign(g.data<float>(), g.data<float>() + g.numel());
                            })
                  .ok());
  // out (kernel, bias) = ids 4, 5; d2 = 2, 3; d1 = 0, 1.
  EXPECT_EQ(order, (std::vector<int>{4, 5, 2, 3, 0, 1}));
  for (size_t id = 0; id < entries.size(); ++id) {
    Tensor g = model.params().grad(static_cast<int>(id));
    EXPECT_EQ(seen[id], std::vector<float>(g.data<float>(), g.data<float>() + g.numel()))
        << entries[id].name;
  }
}

TEST(ModelTest, GraphErrorsNameTheLayer) {
  v1::ModelSpec m = ResidualSpec();
  m.mutable_layers(4)->set_inputs(1, "nope");
  auto r = Model::Create(m, {6}, 3);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.layers[4].inputs[1]: no earlier layer named 'nope'"),
            std::string::npos)
      << r.status();

  m = ResidualSpec();
  auto r2 = Model::Create(m, {6}, 7);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("(7) logits"), std::string::npos) << r2.status();

  // `b` is computed but never used.
  m = ResidualSpec();
  m.mutable_layers(4)->set_inputs(1, "a");
  auto r3 = Model::Create(m, {6}, 3);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("never used"), std::string::npos) << r3.status();

  v1::ModelSpec z;
  z.set_zoo("resnet51");
  auto r4 = Model::Create(z, {32, 32, 3}, 10);
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("known: cnn, mlp, resnet18"), std::string::npos);
}

// One dense layer named `name`, `units` wide, as the whole model.
v1::ModelSpec OneDense(const std::string& name, int units) {
  v1::ModelSpec m;
  auto* d = m.add_layers();
  d->set_name(name);
  d->mutable_dense()->set_units(units);
  return m;
}

// The bytes in use that an out-of-memory message reports ("(M bytes in use)").
int64_t InUse(absl::string_view message) {
  size_t end = message.rfind(" bytes in use)");
  size_t begin = message.rfind('(', end);
  int64_t n = -1;
  if (end == absl::string_view::npos || begin == absl::string_view::npos ||
      !absl::SimpleAtoi(message.substr(begin + 1, end - begin - 1), &n)) {
    return -1;
  }
  return n;
}

// Parameters that no allocator can hold (2^49 bytes: more than x86-64's user
// address space, whatever the machine's memory or overcommit policy) fail
// Create with an error naming the layer, instead of aborting the process.
TEST(ModelTest, ParametersThatCannotBeAllocatedAreAnErrorNamingTheLayer) {
  const int64_t in = int64_t{1} << 17, units = int64_t{1} << 30;
  auto m = Model::Create(OneDense("huge", units), {in}, units);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted) << m.status();
  const int64_t bytes = (in * units + units) * 4;  // kernel and bias, f32
  EXPECT_THAT(std::string(m.status().message()),
              ::testing::StartsWith(absl::StrCat("out of memory: ", bytes,
                                                 " bytes for the parameters (largest: layer huge, ",
                                                 in * units, " values) (")));
  EXPECT_GE(InUse(m.status().message()), 0) << m.status();
}

// Activations that cannot be allocated fail Forward naming the layer, with
// the bytes already in use (at least the parameters and the input); the model
// still runs a batch that fits afterwards.
TEST(ModelTest, ActivationsThatCannotBeAllocatedAreAnErrorNamingTheLayer) {
  const int64_t units = int64_t{1} << 20;
  auto m = Model::Create(OneDense("wide", units), {1}, units);
  ASSERT_TRUE(m.ok()) << m.status();
  Model& model = **m;
  model.params().Initialize(1);
  const int64_t n = int64_t{1} << 26;  // (n, units) f32 is 2^48 bytes
  Tensor x = Tensor::Empty({n, 1});    // 256 MiB, never touched
  LayerContext ctx;
  auto out = model.Forward(x, ctx);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();
  EXPECT_THAT(std::string(out.status().message()),
              ::testing::StartsWith(
                  absl::StrCat("out of memory: ", n * units * 4, " bytes for layer wide (")));
  const int64_t params_bytes = 2 * (units + units) * 4;  // values and gradients
  EXPECT_GE(InUse(out.status().message()), params_bytes + x.bytes()) << out.status();

  Tensor small = Tensor::Zeros({2, 1});
  auto ok = model.Forward(small, ctx);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->shape(), (Shape{2, units}));
}

TEST(ModelTest, ZooMlpAndCnnHaveTheExpectedParameterCounts) {
  v1::ModelSpec mlp;
  mlp.set_zoo("mlp");
  auto a = Model::Create(mlp, {28, 28, 1}, 10);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->params().num_parameters(), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  v1::ModelSpec cnn;
  cnn.set_zoo("cnn");
  auto b = Model::Create(cnn, {28, 28, 1}, 10);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->params().num_parameters(),
            (25 * 32 + 32) + (25 * 32 * 64 + 64) + (7 * 7 * 64 * 1024 + 1024) + (1024 * 10 + 10));
}

// Builds `spec` twice, with operator fusion (the default) and with
// YOKE_FUSE=0, from the same initial parameters; runs `steps` SGD steps on the
// same random batch and requires the logits and every gradient of both to be
// equal bit for bit at every step. Returns the fused model's summary.
std::string ExpectFusionChangesNoBit(const v1::ModelSpec& spec, const Shape& input, int steps) {
  auto fused = Model::Create(spec, input, 3);
  setenv("YOKE_FUSE", "0", 1);
  auto plain = Model::Create(spec, input, 3);
  unsetenv("YOKE_FUSE");
  EXPECT_TRUE(fused.ok()) << fused.status();
  EXPECT_TRUE(plain.ok()) << plain.status();
  if (!fused.ok() || !plain.ok()) return "";
  EXPECT_EQ((*plain)->Summary().find("(fused)"), std::string::npos) << (*plain)->Summary();
  (*fused)->params().Initialize(11);
  (*plain)->params().Initialize(11);
  const int n = 8;
  Shape xs = input;
  xs.insert(xs.begin(), n);
  Tensor x = Tensor::Empty(xs);
  testing::FillUniform(x, 3, 0);
  Tensor y = Tensor::Empty({n}, DType::kI32);
  for (int i = 0; i < n; ++i) y.data<int32_t>()[i] = i % 3;
  SoftmaxCrossEntropy loss;
  LayerContext ctx;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> logits, grads;
    for (Model* m : {fused->get(), plain->get()}) {
      auto out = m->Forward(x, ctx);
      EXPECT_TRUE(out.ok()) << out.status();
      if (!out.ok()) return "";
      logits.emplace_back(out->data<float>(), out->data<float>() + out->numel());
      Tensor dlogits = Tensor::Empty(out->shape());
      EXPECT_TRUE(loss.Compute(*out, y, 1.0f, &dlogits).ok());
      EXPECT_TRUE(m->Backward(dlogits, ctx).ok());
      const Tensor& g = m->params().flat_grads();
      grads.emplace_back(g.data<float>(), g.data<float>() + g.numel());
      float* v = m->params().flat_values().data<float>();
      for (int64_t i = 0; i < g.numel(); ++i) v[i] -= 0.1f * g.data<float>()[i];
    }
    EXPECT_EQ(logits[0], logits[1]) << "logits differ at step " << step;
    EXPECT_EQ(grads[0], grads[1]) << "gradients differ at step " << step;
    double norm = 0;
    for (float g : grads[0]) norm += std::fabs(g);
    EXPECT_GT(norm, 0.0) << "a vacuous comparison: every gradient is zero";
  }
  return (*fused)->Summary();
}

int Count(const std::string& s, const std::string& what) {
  int count = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++count;
  return count;
}

TEST(ModelTest, ConvReluFusionChangesNoBitOfTheZooCnn) {
  v1::ModelSpec cnn;
  cnn.set_zoo("cnn");
  // Both conv+relu+maxpool triples fuse (the convolutions apply the ReLUs,
  // the pools run their backward); the dense layer's relu does not (neither
  // dense layer offers it). The first convolution, with one input channel
  // and no input gradient, also computes its pool (conv_c1.h, with
  // AVX-512); the second has 32 channels and an input gradient.
  const std::string summary = ExpectFusionChangesNoBit(cnn, {28, 28, 1}, 3);
  EXPECT_EQ(Count(summary, "relu (fused)"), 2) << summary;
  const int absorbed = __builtin_cpu_supports("avx512f") ? 1 : 0;
  EXPECT_EQ(Count(summary, "max_pool2d (fused)"), absorbed) << summary;
  EXPECT_EQ(Count(summary, "conv2d (+pool)"), absorbed) << summary;
  EXPECT_EQ(Count(summary, "(fused"), 2 + absorbed) << summary;
}

// Batch norm and the residual add apply the ReLU after them in their own
// buffer (their backward never reads their output): ResNet-20 keeps every
// bit, and none of those ReLUs has a buffer of its own.
TEST(ModelTest, BatchNormAndAddReluFusionChangesNoBitOfResNet20) {
  v1::ModelSpec resnet;
  resnet.set_zoo("resnet20");
  resnet.set_width(8);
  const std::string summary = ExpectFusionChangesNoBit(resnet, {8, 8, 3}, 3);
  // Every ReLU: the stem's and each of the 9 blocks' two, after bn1 and after
  // the add.
  EXPECT_EQ(Count(summary, "relu (fused fwd)"), 19) << summary;
}

// A conv whose output also feeds an add must not apply the relu itself: the
// add would read the activation instead of the convolution.
TEST(ModelTest, ReluIsNotFusedIntoAProducerWithAnotherConsumer) {
  v1::ModelSpec m;
  auto* c = m.add_layers();
  *c = L("c", {"input"});
  c->mutable_conv2d()->set_filters(3);
  c->mutable_conv2d()->set_kernel(3);
  c->mutable_conv2d()->set_stride(1);
  c->mutable_conv2d()->set_padding("same");
  auto* r = m.add_layers();
  *r = L("r", {"c"});
  r->mutable_relu();
  auto* a = m.add_layers();
  *a = L("a", {"c", "r"});
  a->mutable_add();
  auto* f = m.add_layers();
  *f = L("f", {"a"});
  f->mutable_flatten();
  auto* d = m.add_layers();
  *d = L("d", {"f"});
  d->mutable_dense()->set_units(3);
  const std::string summary = ExpectFusionChangesNoBit(m, {6, 6, 2}, 2);
  EXPECT_EQ(Count(summary, "(fused"), 0) << summary;
}

v1::LayerSpec ConvL(const std::string& name, const std::string& input) {
  v1::LayerSpec l = L(name, {input});
  l.mutable_conv2d()->set_filters(3);
  l.mutable_conv2d()->set_kernel(3);
  l.mutable_conv2d()->set_stride(1);
  l.mutable_conv2d()->set_padding("same");
  return l;
}

v1::LayerSpec MaxPoolL(const std::string& name, const std::string& input) {
  v1::LayerSpec l = L(name, {input});
  l.mutable_max_pool2d()->set_size(2);
  l.mutable_max_pool2d()->set_stride(2);
  return l;
}

// c -> r -> p, and c + c2 -> a -> p2: the conv feeds two layers, so it keeps
// its own output (no forward fusion), but the pool still runs the ReLU's
// backward, writing c's gradient beside the add's.
TEST(ModelTest, MaxPoolRunsTheReluBackwardAlsoWhenTheConvFeedsAnotherLayer) {
  v1::ModelSpec m;
  *m.add_layers() = ConvL("c", "input");
  *m.add_layers() = ConvL("c2", "input");
  auto* r = m.add_layers();
  *r = L("r", {"c"});
  r->mutable_relu();
  auto* a = m.add_layers();
  *a = L("a", {"c", "c2"});
  a->mutable_add();
  *m.add_layers() = MaxPoolL("p", "r");
  *m.add_layers() = MaxPoolL("p2", "a");
  auto* j = m.add_layers();
  *j = L("j", {"p", "p2"});
  j->mutable_add();
  auto* f = m.add_layers();
  *f = L("f", {"j"});
  f->mutable_flatten();
  auto* d = m.add_layers();
  *d = L("d", {"f"});
  d->mutable_dense()->set_units(3);
  const std::string summary = ExpectFusionChangesNoBit(m, {6, 6, 2}, 3);
  EXPECT_EQ(Count(summary, "relu (fused bwd)"), 1) << summary;
  EXPECT_EQ(Count(summary, "(fused"), 1) << summary;
}

TEST(ModelTest, ProfilingTimesEveryLayerThatRunsAndNoFusedOne) {
  v1::ModelSpec cnn;
  cnn.set_zoo("cnn");
  auto m = Model::Create(cnn, {28, 28, 1}, 10);
  ASSERT_TRUE(m.ok()) << m.status();
  Model& model = **m;
  model.params().Initialize(2);
  Tensor x = Tensor::Empty({4, 28, 28, 1});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 13) / 13;
  LayerContext ctx;
  auto run = [&] {
    auto out = model.Forward(x, ctx);
    ASSERT_TRUE(out.ok()) << out.status();
    Tensor dl = Tensor::Empty(out->shape());
    for (int64_t i = 0; i < dl.numel(); ++i) dl.data<float>()[i] = 0.01f;
    ASSERT_TRUE(model.Backward(dl, ctx).ok());
  };
  run();  // not profiled
  for (const auto& t : model.layer_times()) EXPECT_EQ(t.forward_s + t.backward_s, 0) << t.name;
  model.set_profiling(true);
  run();
  model.set_profiling(false);
  run();  // not counted either
  const auto times = model.layer_times();
  ASSERT_EQ(times.size(), 10u);
  for (const auto& t : times) {
    if (t.type == "relu (fused)" || t.type == "max_pool2d (fused)") {
      EXPECT_EQ(t.forward_s, 0) << t.name << ": its producer does the forward";
      EXPECT_EQ(t.backward_s, 0) << t.name << ": its consumer does the backward";
    } else {
      EXPECT_GT(t.forward_s, 0) << t.name;
      // The first conv's input needs no gradient, but its weights do.
      EXPECT_GT(t.backward_s, 0) << t.name;
    }
  }
}

}  // namespace
}  // namespace yoke::engine
