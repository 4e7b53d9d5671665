#include "engine/shapes/layer_shapes.h"

#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace yoke::engine::shapes {
namespace {

v1::LayerSpec Conv(int filters, int kernel, int stride = 0, const std::string& padding = "") {
  v1::LayerSpec l;
  l.mutable_conv2d()->set_filters(filters);
  l.mutable_conv2d()->set_kernel(kernel);
  l.mutable_conv2d()->set_stride(stride);
  l.mutable_conv2d()->set_padding(padding);
  return l;
}
v1::LayerSpec Dense(int units) {
  v1::LayerSpec l;
  l.mutable_dense()->set_units(units);
  return l;
}
v1::LayerSpec MaxPool(int size = 0, int stride = 0, const std::string& padding = "") {
  v1::LayerSpec l;
  l.mutable_max_pool2d()->set_size(size);
  l.mutable_max_pool2d()->set_stride(stride);
  l.mutable_max_pool2d()->set_padding(padding);
  return l;
}
v1::LayerSpec Flatten() {
  v1::LayerSpec l;
  l.mutable_flatten();
  return l;
}
v1::LayerSpec Relu() {
  v1::LayerSpec l;
  l.mutable_relu();
  return l;
}
v1::LayerSpec Named(v1::LayerSpec l, const std::string& name,
                    const std::vector<std::string>& inputs = {}) {
  l.set_name(name);
  for (const std::string& in : inputs) l.add_inputs(in);
  return l;
}

// The message of a refused plan, or "accepted".
std::string Refusal(const std::vector<v1::LayerSpec>& layers, const LayerShape& input,
                    int classes) {
  auto plan = PlanLayers(layers, "model.layers", input, classes);
  if (plan.ok()) return "accepted";
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(plan.status().message());
}

TEST(LayerShapesTest, AGoodChainGetsEveryShape) {
  // conv same 3x3 -> relu -> pool 2 -> conv valid 3x3 stride 2 -> flatten -> dense
  const std::vector<v1::LayerSpec> layers = {
      Conv(4, 3), Relu(), MaxPool(), Conv(6, 3, 2, "valid"), Flatten(), Dense(10)};
  auto plan = PlanLayers(layers, "model.layers", LayerShape{28, 28, 1}, 10);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<LayerShape> want = {{28, 28, 4}, {28, 28, 4}, {14, 14, 4},
                                        {6, 6, 6},   {216},       {10}};
  EXPECT_EQ(plan->shapes, want);
  EXPECT_EQ(plan->names, (std::vector<std::string>{"conv2d_0", "relu_1", "max_pool2d_2", "conv2d_3",
                                                   "flatten_4", "dense_5"}));
  EXPECT_EQ(plan->inputs[0], std::vector<int>{-1});
  EXPECT_EQ(plan->inputs[5], std::vector<int>{4});
}

TEST(LayerShapesTest, AResidualGraphResolvesItsInputs) {
  v1::LayerSpec add;
  add.mutable_add();
  const std::vector<v1::LayerSpec> layers = {Named(Dense(5), "a"), Named(Dense(5), "b"),
                                             Named(add, "sum", {"a", "b"}), Dense(3)};
  auto plan = PlanLayers(layers, "model.layers", LayerShape{6}, 3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->inputs[2], (std::vector<int>{0, 1}));
  EXPECT_EQ(plan->shapes[2], LayerShape{5});
}

TEST(LayerShapesTest, EachShapeRuleIsRefusedWithItsMessage) {
  EXPECT_EQ(Refusal({Conv(4, 5, 1, "valid"), Flatten(), Dense(2)}, {3, 3, 1}, 2),
            "model.layers[0] (conv2d_0): conv2d: a 5x5 window with padding 'valid' does not fit "
            "input (3, 3, 1); use padding 'same' or a smaller kernel");
  EXPECT_EQ(Refusal({Conv(4, 3), Flatten(), Dense(2)}, {8}, 2),
            "model.layers[0] (conv2d_0): conv2d expects 1 input of rank 3 (H, W, C), got (8)");
  EXPECT_EQ(Refusal({MaxPool(3), Flatten(), Dense(2)}, {2, 2, 1}, 2),
            "model.layers[0] (max_pool2d_0): max_pool2d: a 3x3 window with padding 'valid' does "
            "not fit input (2, 2, 1); use padding 'same' or a smaller size");
  EXPECT_EQ(Refusal({Dense(2)}, {4, 4, 1}, 2),
            "model.layers[0] (dense_0): dense expects 1 input of rank 1 (features), got "
            "(4, 4, 1); add a flatten layer before it");
  v1::LayerSpec gap;
  gap.mutable_global_avg_pool();
  EXPECT_EQ(Refusal({gap, Dense(2)}, {4}, 2),
            "model.layers[0] (global_avg_pool_0): global_avg_pool expects 1 input of rank 3 "
            "(H, W, C), got (4)");
  v1::LayerSpec add;
  add.mutable_add();
  EXPECT_EQ(Refusal({Named(Dense(5), "a"), Named(Dense(4), "b", {"input"}),
                     Named(add, "s", {"a", "b"}), Dense(2)},
                    {6}, 2),
            "model.layers[2] (s): add expects inputs of identical shape: input 0 is (5) but "
            "input 1 is (4)");
  EXPECT_EQ(Refusal({Flatten(), Dense(7)}, {4, 4, 1}, 10),
            "model.layers: the last layer must output (10) logits, one per class; it outputs (7)");
  EXPECT_EQ(Refusal({Conv(10, 1)}, {4, 4, 1}, 10),
            "model.layers: the last layer must output (10) logits, one per class; it outputs "
            "(4, 4, 10)");
}

TEST(LayerShapesTest, TheGraphRulesAreRefusedWithTheirMessages) {
  EXPECT_EQ(Refusal({}, {4}, 2), "model: needs a zoo entry or a non-empty layers list");
  EXPECT_EQ(Refusal({Named(Dense(2), "input")}, {4}, 2),
            "model.layers[0].name: 'input' is already taken");
  EXPECT_EQ(Refusal({Named(Dense(2), "x"), Named(Dense(2), "x")}, {4}, 2),
            "model.layers[1].name: 'x' is already taken");
  EXPECT_EQ(Refusal({Dense(4), Named(Dense(2), "y", {"nope"})}, {4}, 2),
            "model.layers[1].inputs[0]: no earlier layer named 'nope' (a layer may read 'input' "
            "or layers listed before it)");
  EXPECT_EQ(Refusal({Named(Dense(4), "a"), Named(Dense(2), "b", {"input"})}, {4}, 2),
            "model.layers[0] (a): its output is never used; only the last layer may be "
            "unconsumed");
  EXPECT_NE(Refusal({v1::LayerSpec()}, {4}, 2).find("model.layers[0]: layer has no type (known: "),
            std::string::npos);
  // Without an input shape the graph rules still hold, and nothing else.
  auto plan =
      PlanLayers({Named(Dense(4), "a"), Named(Dense(2), "b", {"input"})}, "m", std::nullopt, 2);
  EXPECT_FALSE(plan.ok());
  plan = PlanLayers({Conv(4, 3), Dense(7)}, "m", std::nullopt, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->shapes.empty());
}

TEST(LayerShapesTest, EachArgumentRuleIsRefusedWithItsMessage) {
  auto first = [](const v1::LayerSpec& l) {
    const std::vector<std::string> e = ArgumentErrors(l);
    return e.empty() ? std::string("none") : e[0];
  };
  EXPECT_EQ(first(Dense(0)), "dense.units: must be > 0, got 0");
  EXPECT_EQ(first(Conv(0, 3)), "conv2d.filters: must be > 0, got 0");
  EXPECT_EQ(first(Conv(4, -1)), "conv2d.kernel: must be > 0, got -1");
  EXPECT_EQ(first(Conv(4, 3, -2)), "conv2d.stride: must be >= 0, got -2");
  EXPECT_EQ(first(Conv(4, 3, 1, "full")),
            "conv2d.padding: unknown padding 'full' (known: same, valid)");
  EXPECT_EQ(first(MaxPool(-1)), "max_pool2d.size: must be >= 0, got -1");
  EXPECT_EQ(first(MaxPool(2, -1)), "max_pool2d.stride: must be >= 0, got -1");
  EXPECT_EQ(first(MaxPool(2, 2, "SAME")),
            "max_pool2d.padding: unknown padding 'SAME' (known: same, valid)");
  v1::LayerSpec l;
  l.mutable_dropout()->set_rate(1);
  EXPECT_EQ(first(l), "dropout.rate: must be in [0, 1), got 1");
  l.mutable_batch_norm()->set_momentum(1.5f);
  EXPECT_EQ(first(l), "batch_norm.momentum: must be in [0, 1], got 1.5");
  l.mutable_batch_norm()->set_momentum(0.5f);
  l.mutable_batch_norm()->set_epsilon(-1e-5f);
  EXPECT_EQ(first(l), "batch_norm.epsilon: must be finite and >= 0, got -1e-05");
  l.mutable_leaky_relu()->set_alpha(std::numeric_limits<float>::infinity());
  EXPECT_EQ(first(l), "leaky_relu.alpha: must be finite, got inf");
  EXPECT_EQ(first(Conv(4, 3, 0, "valid")), "none");
  // In a list, the first broken argument names its layer.
  EXPECT_EQ(Refusal({Flatten(), Dense(0)}, {4}, 2),
            "model.layers[1]: dense.units: must be > 0, got 0");
}

TEST(LayerShapesTest, DefaultsAndPadding) {
  EXPECT_EQ(Conv2dWindow(Conv(4, 3).conv2d()).stride, 1);
  EXPECT_TRUE(Conv2dWindow(Conv(4, 3).conv2d()).same);
  const Window pool = Pool2dWindow(MaxPool(3).max_pool2d());
  EXPECT_EQ(pool.size, 3);
  EXPECT_EQ(pool.stride, 3);
  EXPECT_FALSE(pool.same);
  EXPECT_EQ(Pool2dWindow(v1::Pool2dSpec()).size, 2);
  const Padding1d p = ComputePadding(224, 7, 2, true);  // ResNet stem: total 5 -> 2 + 3
  EXPECT_EQ(p.out, 112);
  EXPECT_EQ(p.before, 2);
  EXPECT_EQ(p.after, 3);
  EXPECT_EQ(ComputePadding(3, 5, 1, false).out, 0);
  EXPECT_EQ(ComputePadding(9, 3, 3, false).out, 3);
}

// Only layer b - 1's output may cross a cut before b: a residual join
// reaching back, or a later read of the model input, leaves no cut.
TEST(CutPointsTest, OnlyWhereASingleOutputCrosses) {
  // 0 <- input, 1 <- 0, 2 <- 1, 3 <- (2, 0), 4 <- 3
  EXPECT_EQ(CutPoints({{-1}, {0}, {1}, {2, 0}, {3}}), (std::vector<int>{1, 4}));
  EXPECT_EQ(CutPoints({{-1}, {0}, {1}}), (std::vector<int>{1, 2}));
  EXPECT_TRUE(CutPoints({{-1}, {0, -1}}).empty());
  EXPECT_TRUE(CutPoints({{-1}}).empty());
}

}  // namespace
}  // namespace yoke::engine::shapes
