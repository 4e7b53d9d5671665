// The CUDA activation, add, flatten, global_avg_pool, pool2d, dropout and
// softmax layers through the registry, without a device: each is registered
// for CUDA, is made from the spec (its CPU twin checking the values as on
// the CPU), keeps the spec's type and builds to the CPU layer's shape.
// (Their kernels' per-element functors are tested against the CPU layers in
// engine/kernels/cuda/math/*_fn_test.cc; on a device, the op-parity harness
// compares the layers themselves.)
#include <algorithm>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/param_set.h"
#include "engine/registry.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

struct Case {
  v1::LayerSpec spec;
  std::vector<Shape> inputs;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  auto add = [&](v1::LayerSpec s, std::vector<Shape> in) { cases.push_back({s, in}); };
  v1::LayerSpec s;
  s.mutable_relu();
  add(s, {{3, 5}});
  s.mutable_leaky_relu()->set_alpha(0.2f);
  add(s, {{7}});
  s.mutable_sigmoid();
  add(s, {{2, 2, 3}});
  s.mutable_tanh();
  add(s, {{4}});
  s.mutable_gelu();
  add(s, {{4}});
  s.mutable_softmax();
  add(s, {{3, 10}});
  s.mutable_flatten();
  add(s, {{4, 5, 3}});
  s.mutable_global_avg_pool();
  add(s, {{5, 7, 3}});
  s.mutable_dropout()->set_rate(0.5f);
  add(s, {{9}});
  s.mutable_add();
  add(s, {{4, 4, 3}, {4, 4, 3}, {4, 4, 3}});
  s.mutable_max_pool2d()->set_size(3);
  s.mutable_max_pool2d()->set_stride(2);
  s.mutable_max_pool2d()->set_padding("same");
  add(s, {{4, 6, 3}});
  s.mutable_avg_pool2d()->set_size(2);
  add(s, {{5, 7, 1}});
  return cases;
}

TEST(CudaElementwiseLayersHostTest, EachBuildsLikeItsCpuLayer) {
  for (const Case& c : Cases()) {
    const std::string kind = LayerKindName(c.spec);
    SCOPED_TRACE(kind);
    absl::StatusOr<std::unique_ptr<Layer>> gpu =
        LayerRegistry::Global().Create(c.spec, Device::CUDA(0));
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    absl::StatusOr<std::unique_ptr<Layer>> cpu = LayerRegistry::Global().Create(c.spec);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    EXPECT_EQ((*gpu)->type(), kind);
    ParamSet gp, cp;
    absl::StatusOr<Shape> gs = (*gpu)->Build(c.inputs, &gp);
    absl::StatusOr<Shape> cs = (*cpu)->Build(c.inputs, &cp);
    ASSERT_TRUE(gs.ok()) << gs.status();
    ASSERT_TRUE(cs.ok()) << cs.status();
    EXPECT_EQ(*gs, *cs);
    EXPECT_EQ(gp.entries().size(), 0u);
  }
}

TEST(CudaElementwiseLayersHostTest, EveryKindIsRegisteredForCuda) {
  const std::vector<std::string> names = LayerRegistry::Global().Names(Device::Kind::kCUDA);
  for (const char* kind : {"relu", "leaky_relu", "sigmoid", "tanh", "gelu", "softmax", "flatten",
                           "global_avg_pool", "dropout", "add", "max_pool2d", "avg_pool2d"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), kind), names.end()) << kind;
  }
}

TEST(CudaElementwiseLayersHostTest, BadSpecsFailAsOnTheCpu) {
  v1::LayerSpec s;
  s.mutable_dropout()->set_rate(1.0f);
  EXPECT_FALSE(LayerRegistry::Global().Create(s, Device::CUDA(0)).ok());
  s.mutable_max_pool2d()->set_size(-1);
  EXPECT_FALSE(LayerRegistry::Global().Create(s, Device::CUDA(0)).ok());
  v1::LayerSpec a;
  a.mutable_add();
  absl::StatusOr<std::unique_ptr<Layer>> add = LayerRegistry::Global().Create(a, Device::CUDA(0));
  ASSERT_TRUE(add.ok());
  ParamSet p;
  EXPECT_FALSE((*add)->Build({{3}, {4}}, &p).ok());
}

}  // namespace
}  // namespace yoke::engine
