// Per-op parity (`make gpu-check` stage 3): every CUDA layer against its CPU
// twin on the same spec, parameters and inputs, forward, input gradients,
// parameter gradients and state (batch-norm running statistics); then the
// losses and the optimizers. fp32 with TF32 off: relative L2 <= 1e-5, and
// bit for bit where the arithmetic has one order (ReLU, add, flatten, max
// pool, dropout masks). Every output is poisoned with NaN first, so an
// element a kernel never writes fails the check. With
// YOKE_PARITY_PRECISION=tf32 the device computes at training.precision
// tf32: the cases are named NAME@tf32, convolutions and dense layers are
// held to 5e-4, and every other op to its fp32 bound.
//
// gpu-labelled: skips without a CUDA device.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda_parity/parity_util.h"
#include "engine/device_backend.h"
#include "engine/registry.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace yoke::engine::parity {
namespace {

constexpr double kFp32 = 1e-5;
// training.precision: tf32 (YOKE_PARITY_PRECISION=tf32): the products read
// their fp32 inputs at TF32's 10-bit mantissa.
constexpr double kTf32 = 5e-4;

struct OpCase {
  std::string name;           // unique, for the log and the test name
  std::string spec;           // LayerSpec in text format
  std::vector<Shape> inputs;  // per example
  int64_t batch;
  bool training = true;
  double bound = kFp32;  // 0: bitwise
  float range = 1.0f;    // inputs uniform in [-range, range)
  float step = 0.0f;     // > 0: inputs rounded to multiples (ties for max pool)
  int64_t global_step = 3;
  int replica = 0, index = 0;  // dropout streams
};

std::vector<OpCase> Cases() {
  return {
      {"dense_7to5_n3", "dense { units: 5 }", {{7}}, 3},
      {"dense_nobias_1to1_n1", "dense { units: 1 no_bias: true }", {{1}}, 1},
      {"dense_64to10_n4", "dense { units: 10 }", {{64}}, 4},
      {"conv_k3s1_same_c3", "conv2d { filters: 8 kernel: 3 }", {{9, 9, 3}}, 2},
      {"conv_k3s2_same_asym", "conv2d { filters: 6 kernel: 3 stride: 2 }", {{9, 9, 4}}, 2},
      {"conv_k3s2_same_even", "conv2d { filters: 4 kernel: 3 stride: 2 }", {{8, 8, 4}}, 3},
      {"conv_k7s2_stem", "conv2d { filters: 8 kernel: 7 stride: 2 }", {{15, 15, 3}}, 2},
      {"conv_k1_valid_nobias",
       "conv2d { filters: 8 kernel: 1 padding: 'valid' no_bias: true }",
       {{5, 5, 8}},
       2},
      {"conv_k3s2_valid_c1",
       "conv2d { filters: 4 kernel: 3 stride: 2 padding: 'valid' }",
       {{8, 8, 1}},
       3},
      {"conv_resnet20_16", "conv2d { filters: 16 kernel: 3 no_bias: true }", {{32, 32, 16}}, 4},
      {"maxpool_2", "max_pool2d { size: 2 }", {{8, 8, 3}}, 2, true, 0},
      {"maxpool_3s2_same",
       "max_pool2d { size: 3 stride: 2 padding: 'same' }",
       {{9, 9, 4}},
       2,
       true,
       0},
      {"avgpool_2", "avg_pool2d { size: 2 }", {{6, 6, 2}}, 2},
      {"avgpool_3s2_same", "avg_pool2d { size: 3 stride: 2 padding: 'same' }", {{7, 7, 3}}, 3},
      {"global_avg_pool", "global_avg_pool {}", {{5, 5, 6}}, 3},
      {"batch_norm_train_img", "batch_norm {}", {{6, 6, 8}}, 4},
      {"batch_norm_train_c3_n1", "batch_norm { momentum: 0.2 epsilon: 0.001 }", {{4, 4, 3}}, 1},
      {"batch_norm_train_flat", "batch_norm {}", {{10}}, 8},
      {"batch_norm_eval", "batch_norm {}", {{6, 6, 8}}, 4, false},
      {"dropout_train", "dropout { rate: 0.5 }", {{6, 6, 3}}, 3, true, 0},
      {"dropout_eval", "dropout { rate: 0.5 }", {{6, 6, 3}}, 3, false, 0},
      {"flatten", "flatten {}", {{4, 4, 3}}, 2, true, 0},
      {"relu", "relu {}", {{3, 3, 5}}, 2, true, 0},
      {"leaky_relu", "leaky_relu { alpha: 0.1 }", {{10}}, 4},
      {"sigmoid", "sigmoid {}", {{10}}, 4},
      {"tanh", "tanh {}", {{10}}, 4},
      {"gelu", "gelu {}", {{3, 3, 5}}, 2},
      {"softmax", "softmax {}", {{10}}, 4},
      {"add2", "add {}", {{4, 4, 6}, {4, 4, 6}}, 2, true, 0},
      // Cases the kernels' authors asked for: edges of each kernel's indexing.
      {"add3", "add {}", {{4, 4, 6}, {4, 4, 6}, {4, 4, 6}}, 3, true, 0},
      {"maxpool_3s2_same_n1",
       "max_pool2d { size: 3 stride: 2 padding: 'same' }",
       {{4, 6, 3}},
       1,
       true,
       0},
      {"maxpool_2s1_same_c1",
       "max_pool2d { size: 2 stride: 1 padding: 'same' }",
       {{5, 4, 1}},
       3,
       true,
       0},
      {"maxpool_2_leftover", "max_pool2d { size: 2 }", {{5, 7, 3}}, 2, true, 0},
      {"maxpool_3s1_same_ties",
       "max_pool2d { size: 3 stride: 1 padding: 'same' }",
       {{6, 5, 3}},
       2,
       true,
       0,
       2.0f,
       0.5f},
      {"avgpool_3s2_same_n1", "avg_pool2d { size: 3 stride: 2 padding: 'same' }", {{4, 6, 3}}, 1},
      {"avgpool_3s1_same_c1", "avg_pool2d { size: 3 stride: 1 padding: 'same' }", {{5, 5, 1}}, 2},
      {"global_avg_pool_1x1", "global_avg_pool {}", {{1, 1, 3}}, 2},
      {"global_avg_pool_c1", "global_avg_pool {}", {{7, 5, 1}}, 3},
      {"batch_norm_chunks", "batch_norm {}", {{16, 16, 4}}, 4},
      {"batch_norm_one_row", "batch_norm {}", {{3}}, 1},
      {"batch_norm_c1", "batch_norm {}", {{1, 1, 1}}, 5},
      {"dropout_p10_streams",
       "dropout { rate: 0.1 }",
       {{5, 5, 3}},
       3,
       true,
       0,
       1.0f,
       0.0f,
       123456,
       3,
       17},
      {"dropout_p90_streams",
       "dropout { rate: 0.9 }",
       {{5, 5, 3}},
       3,
       true,
       0,
       1.0f,
       0.0f,
       123456,
       3,
       17},
      {"dropout_wide", "dropout { rate: 0.5 }", {{40001}}, 2, true, 0},
      {"softmax_257", "softmax {}", {{3, 2, 257}}, 1},
      {"softmax_k1", "softmax {}", {{1}}, 2},
      {"leaky_relu_default", "leaky_relu {}", {{10}}, 3},
      {"gelu_saturated", "gelu {}", {{64}}, 2, true, kFp32, 12.0f},
      {"sigmoid_saturated", "sigmoid {}", {{64}}, 2, true, kFp32, 12.0f},
      {"dense_cnn_3136to1024", "dense { units: 1024 }", {{3136}}, 4},
      {"conv_cnn_k5_c1", "conv2d { filters: 32 kernel: 5 }", {{28, 28, 1}}, 2},
      {"conv_k2s2_valid_nonsquare",
       "conv2d { filters: 3 kernel: 2 stride: 2 padding: 'valid' }",
       {{9, 7, 2}},
       2},
      {"conv_k5s3_same", "conv2d { filters: 4 kernel: 5 stride: 3 }", {{7, 9, 3}}, 2},
      {"conv_k4s2_same_even_kernel", "conv2d { filters: 2 kernel: 4 stride: 2 }", {{6, 5, 1}}, 3},
      {"conv_k1s2_same_shortcut",
       "conv2d { filters: 8 kernel: 1 stride: 2 no_bias: true }",
       {{5, 5, 4}},
       2},
      {"conv_k3_on_1x1", "conv2d { filters: 3 kernel: 3 }", {{1, 1, 1}}, 2},
      {"tanh_saturated", "tanh {}", {{64}}, 2, true, kFp32, 12.0f},
  };
}

Shape WithBatch(int64_t n, const Shape& s) {
  Shape out = s;
  out.insert(out.begin(), n);
  return out;
}

// One layer on one device, built with parameters initialised from `seed`.
struct Built {
  std::unique_ptr<Layer> layer;
  ParamSet params;
  Shape out;
};

void BuildOn(const v1::LayerSpec& spec, const OpCase& c, Device device, Built* b) {
  auto layer = LayerRegistry::Global().Create(spec, device);
  ASSERT_TRUE(layer.ok()) << layer.status();
  b->layer = *std::move(layer);
  b->layer->set_name("l");
  b->layer->set_index(c.index);
  auto out = b->layer->Build(c.inputs, &b->params);
  ASSERT_TRUE(out.ok()) << out.status();
  b->out = *out;
  ASSERT_TRUE(b->params.Finalize(device).ok());
  b->params.Initialize(7);
}

class OpParityTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpParityTest, MatchesCpu) {
  SKIP_UNLESS_PARITY_DEVICE();
  const OpCase& c = GetParam();
  v1::LayerSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(c.spec, &spec)) << c.spec;
  // Under tf32 the products (conv2d, dense) get the tf32 bound; the rest
  // must not change at all.
  const bool tf32 = ParityPrecision() == "tf32";
  const bool product = spec.has_conv2d() || spec.has_dense();
  const std::string name = tf32 ? c.name + "@tf32" : c.name;
  const double bound = tf32 && product ? kTf32 : c.bound;
  const double param_bound = tf32 && product ? kTf32 : kFp32;
  if (!SelfTest()) {
    ASSERT_TRUE(SetDevicePrecision(Gpu(), tf32 ? "tf32" : "fp32").ok());
  }
  Built cpu, gpu;
  ASSERT_NO_FATAL_FAILURE(BuildOn(spec, c, Device::CPU(), &cpu));
  ASSERT_NO_FATAL_FAILURE(BuildOn(spec, c, Gpu(), &gpu));

  std::vector<Tensor> xh, xd;
  std::vector<const Tensor*> xc, xg;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    xh.push_back(RandomHost(WithBatch(c.batch, c.inputs[i]), 100 + i, -c.range, c.range));
    if (c.step > 0) {
      float* p = xh.back().data<float>();
      for (int64_t e = 0; e < xh.back().numel(); ++e) p[e] = std::round(p[e] / c.step) * c.step;
    }
    xd.push_back(ToDevice(xh.back()));
  }
  for (size_t i = 0; i < xh.size(); ++i) {
    xc.push_back(&xh[i]);
    xg.push_back(&xd[i]);
  }
  LayerContext ctx;
  ctx.training = c.training;
  ctx.seed = 11;
  ctx.step = c.global_step;
  ctx.replica = c.replica;
  const Shape out_shape = WithBatch(c.batch, cpu.out);
  Tensor yc = Tensor::Empty(out_shape), yg = NanDevice(out_shape);
  ASSERT_TRUE(cpu.layer->Forward(xc, &yc, ctx).ok());
  ASSERT_TRUE(gpu.layer->Forward(xg, &yg, ctx).ok());
  bool ok = Record(name, "forward", Compare(ToHost(yg), yc), bound);

  Tensor dy = RandomHost(out_shape, 200);
  Tensor dyd = ToDevice(dy);
  std::vector<Tensor> dxc, dxg;
  std::vector<Tensor*> dinc, ding;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    dxc.push_back(Tensor::Empty(xh[i].shape()));
    dxg.push_back(NanDevice(xh[i].shape()));
  }
  for (size_t i = 0; i < dxc.size(); ++i) {
    dinc.push_back(&dxc[i]);
    ding.push_back(&dxg[i]);
  }
  if (c.training) {
    ASSERT_TRUE(cpu.layer->Backward(xc, yc, dy, dinc, ctx).ok());
    absl::Status s = gpu.layer->Backward(xg, yg, dyd, ding, ctx);
    ASSERT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < dxc.size(); ++i) {
      ok &= Record(name, "dx" + std::to_string(i), Compare(ToHost(dxg[i]), dxc[i]), bound);
    }
    if (!cpu.params.entries().empty()) {
      ok &= Record(name, "dparams",
                   Compare(ToHost(gpu.params.flat_grads()), cpu.params.flat_grads()), param_bound);
    }
  }
  if (!cpu.params.state_entries().empty()) {
    ok &= Record(name, "state", Compare(ToHost(gpu.params.flat_state()), cpu.params.flat_state()),
                 kFp32);
  }
  EXPECT_TRUE(ok) << c.name << ": see the parity log ($YOKE_PARITY_LOG) for the measures";
}

INSTANTIATE_TEST_SUITE_P(Layers, OpParityTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace yoke::engine::parity
