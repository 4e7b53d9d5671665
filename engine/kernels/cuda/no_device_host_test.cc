// The CUDA backend on a machine without a usable GPU (CI): every request
// for device memory fails with UNAVAILABLE and cudart's reason, never a
// crash, and what needs no device (creating a loss or a layer) works.
// Skips on a machine with a GPU, where the gpu-labelled tests run instead.
#include <string>

#include "engine/device_backend.h"
#include "engine/kernels/cuda/testing/cuda_test_util.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "engine/registry.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

class NoDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::NoDeviceReason().empty()) GTEST_SKIP() << "this machine has a usable GPU";
  }
};

TEST_F(NoDeviceTest, DeviceMemoryIsUnavailableWithCudartsReason) {
  absl::StatusOr<Tensor> t = Tensor::Allocate({4}, DType::kF32, Device::CUDA(0), "a test tensor");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnavailable) << t.status();
  EXPECT_NE(t.status().message().find("cudaGetDeviceCount"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("allocating a test tensor"), std::string::npos) << t.status();
}

TEST_F(NoDeviceTest, AModelOnCudaFailsAtItsParameters) {
  v1::ModelSpec spec;
  spec.set_zoo("mlp");
  auto m = Model::Create(spec, {8}, 3, Device::CUDA(0));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnavailable) << m.status();
}

TEST_F(NoDeviceTest, LossesAndLayersAreMadeWithoutADevice) {
  EXPECT_TRUE(CreateLoss("softmax_cross_entropy", 0.1f, Device::CUDA(0)).ok());
  v1::LayerSpec dense;
  dense.mutable_dense()->set_units(3);
  EXPECT_TRUE(LayerRegistry::Global().Create(dense, Device::CUDA(0)).ok());
  auto backend = BackendFor(Device::CUDA(0));
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_STREQ((*backend)->name(), "cuda");
  EXPECT_EQ((*backend)->Synchronize(0).code(), absl::StatusCode::kUnavailable);
}

// The precision rules hold before any device is touched: a precision the
// backend lacks is refused by name, and tf32 is a GPU precision.
TEST_F(NoDeviceTest, PrecisionsAreCheckedByName) {
  EXPECT_TRUE(SetDevicePrecision(Device::CPU(), "fp32").ok());
  EXPECT_TRUE(SetDevicePrecision(Device::CPU(), "").ok());
  absl::Status cpu_tf32 = SetDevicePrecision(Device::CPU(), "tf32");
  EXPECT_EQ(cpu_tf32.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cpu_tf32.message().find("'tf32' is not implemented on the CPU"), std::string::npos)
      << cpu_tf32;
  absl::Status bf16 = SetDevicePrecision(Device::CUDA(0), "bf16");
  EXPECT_EQ(bf16.code(), absl::StatusCode::kInvalidArgument) << bf16;
  EXPECT_NE(bf16.message().find("'bf16' is not implemented on CUDA yet"), std::string::npos)
      << bf16;
  // A known one reaches the device, which this machine lacks.
  EXPECT_EQ(SetDevicePrecision(Device::CUDA(0), "tf32").code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace yoke::engine
