// Host checks of the CUDA dense and conv2d layers (no device needed): they
// are registered for CUDA, refuse what the CPU layer refuses, and Build
// declares the CPU layer's parameters (names, shapes, order) and output
// shape, with and without bias. Forward and Backward need a device: the
// op-parity harness compares them with the CPU layers on a GPU.
#include <memory>
#include <string>
#include <vector>

#include "engine/layer.h"
#include "engine/param_set.h"
#include "engine/registry.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

struct Built {
  std::unique_ptr<Layer> layer;
  ParamSet params;
  Shape out;
};

void BuildOn(Device device, const v1::LayerSpec& spec, const Shape& input, Built* b) {
  absl::StatusOr<std::unique_ptr<Layer>> layer = LayerRegistry::Global().Create(spec, device);
  ASSERT_TRUE(layer.ok()) << layer.status();
  b->layer = *std::move(layer);
  b->layer->set_name("l");
  absl::StatusOr<Shape> out = b->layer->Build({input}, &b->params);
  ASSERT_TRUE(out.ok()) << out.status();
  b->out = *out;
}

void ExpectSameAsCpu(const v1::LayerSpec& spec, const Shape& input) {
  SCOPED_TRACE(spec.ShortDebugString() + " on " + ShapeString(input));
  Built cpu, cuda;
  BuildOn(Device::CPU(), spec, input, &cpu);
  BuildOn(Device::CUDA(0), spec, input, &cuda);
  EXPECT_EQ(cuda.out, cpu.out);
  EXPECT_STREQ(cuda.layer->type(), cpu.layer->type());
  EXPECT_EQ(cuda.layer->ForwardMacsPerExample(), cpu.layer->ForwardMacsPerExample());
  ASSERT_EQ(cuda.params.entries().size(), cpu.params.entries().size());
  for (size_t i = 0; i < cpu.params.entries().size(); ++i) {
    EXPECT_EQ(cuda.params.entries()[i].name, cpu.params.entries()[i].name);
    EXPECT_EQ(cuda.params.entries()[i].shape, cpu.params.entries()[i].shape);
  }
}

v1::LayerSpec Dense(int units, bool no_bias) {
  v1::LayerSpec s;
  s.mutable_dense()->set_units(units);
  s.mutable_dense()->set_no_bias(no_bias);
  return s;
}

v1::LayerSpec Conv(int filters, int kernel, int stride, const std::string& padding, bool no_bias) {
  v1::LayerSpec s;
  v1::Conv2dSpec* c = s.mutable_conv2d();
  c->set_filters(filters);
  c->set_kernel(kernel);
  c->set_stride(stride);
  c->set_padding(padding);
  c->set_no_bias(no_bias);
  return s;
}

TEST(CudaLayersHostTest, DenseBuildsAsTheCpuLayer) {
  ExpectSameAsCpu(Dense(5, false), {7});
  ExpectSameAsCpu(Dense(5, true), {7});
  ExpectSameAsCpu(Dense(1, false), {1});
}

TEST(CudaLayersHostTest, Conv2dBuildsAsTheCpuLayer) {
  ExpectSameAsCpu(Conv(4, 3, 1, "same", false), {5, 6, 3});
  ExpectSameAsCpu(Conv(4, 3, 2, "same", true), {7, 8, 2});
  ExpectSameAsCpu(Conv(2, 5, 1, "valid", false), {9, 9, 1});
  ExpectSameAsCpu(Conv(8, 7, 2, "same", true), {32, 32, 3});
}

TEST(CudaLayersHostTest, RefusesWhatTheCpuLayerRefuses) {
  EXPECT_FALSE(LayerRegistry::Global().Create(Dense(0, false), Device::CUDA(0)).ok());
  EXPECT_FALSE(LayerRegistry::Global().Create(Conv(4, 0, 1, "same", false), Device::CUDA(0)).ok());
  absl::StatusOr<std::unique_ptr<Layer>> conv =
      LayerRegistry::Global().Create(Conv(4, 5, 1, "valid", false), Device::CUDA(0));
  ASSERT_TRUE(conv.ok()) << conv.status();
  ParamSet params;
  EXPECT_FALSE((*conv)->Build({{3, 3, 1}}, &params).ok());  // the window does not fit
}

}  // namespace
}  // namespace yoke::engine
