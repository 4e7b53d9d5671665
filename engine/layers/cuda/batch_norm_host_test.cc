// Host checks of the CUDA batch_norm layer that need no device: it is
// registered for CUDA, builds the CPU layer's parameters and state through
// its twin, and refuses synchronized batch norm before touching any memory.
// Its arithmetic is tested in engine/kernels/cuda/math/batch_norm_math_test.cc.
#include <memory>

#include "engine/layers/cuda/batch_norm.h"
#include "engine/registry.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

class NeverSum final : public CrossReplicaSum {
 public:
  absl::Status SumInPlace(float*, int64_t, const std::string&) override {
    ADD_FAILURE() << "the CUDA layer must refuse before summing";
    return absl::OkStatus();
  }
};

std::unique_ptr<Layer> MakeLayer(ParamSet* params) {
  v1::LayerSpec spec;
  spec.mutable_batch_norm()->set_momentum(0.2f);
  auto layer = LayerRegistry::Global().Create(spec, Device::CUDA(0));
  EXPECT_TRUE(layer.ok()) << layer.status();
  if (!layer.ok()) return nullptr;
  (*layer)->set_name("bn");
  auto shape = (*layer)->Build({{4, 5, 3}}, params);
  EXPECT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(*shape, (Shape{4, 5, 3}));
  return *std::move(layer);
}

TEST(CudaBatchNormHostTest, RegisteredAndBuildsTheCpuParameters) {
  ParamSet params;
  std::unique_ptr<Layer> layer = MakeLayer(&params);
  ASSERT_NE(layer, nullptr);
  EXPECT_STREQ(layer->type(), "batch_norm");
  ASSERT_EQ(params.entries().size(), 2u);
  EXPECT_EQ(params.entries()[0].name, "bn/gamma");
  EXPECT_EQ(params.entries()[1].name, "bn/beta");
  ASSERT_EQ(params.state_entries().size(), 2u);
  EXPECT_EQ(params.state_entries()[0].name, "bn/running_mean");
  EXPECT_EQ(params.state_entries()[1].name, "bn/running_var");
}

TEST(CudaBatchNormHostTest, RefusesSynchronizedBatchNorm) {
  ParamSet params;
  std::unique_ptr<Layer> layer = MakeLayer(&params);
  ASSERT_NE(layer, nullptr);
  NeverSum sum;
  LayerContext ctx;
  ctx.training = true;
  ctx.sync_stats = &sum;
  Tensor x = Tensor::Zeros({2, 4, 5, 3}), y = Tensor::Zeros({2, 4, 5, 3});
  const absl::Status f = layer->Forward({&x}, &y, ctx);
  EXPECT_EQ(f.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(f.message().find("synchronized batch norm on CUDA needs the GPU reducer"),
            std::string::npos)
      << f;
  Tensor dx = Tensor::Zeros({2, 4, 5, 3});
  const absl::Status b = layer->Backward({&x}, y, y, {&dx}, ctx);
  EXPECT_EQ(b.code(), absl::StatusCode::kFailedPrecondition) << b;
}

}  // namespace
}  // namespace yoke::engine::cuda
