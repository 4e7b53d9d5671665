// Host checks of the CUDA losses that need no device: names, argument
// errors and operand checks (which come before any device call). Their
// arithmetic is tested in engine/kernels/cuda/math/loss_math_test.cc.
#include "engine/losses/cuda/cuda_losses.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

TEST(CudaLossesHostTest, NamesAndArgumentErrors) {
  auto sce = CreateCudaLoss("", 0.1f, 0);  // unset: the documented default
  ASSERT_TRUE(sce.ok()) << sce.status();
  EXPECT_STREQ((*sce)->name(), "softmax_cross_entropy");
  auto mse = CreateCudaLoss("mse", 0.0f, 0);
  ASSERT_TRUE(mse.ok()) << mse.status();
  EXPECT_STREQ((*mse)->name(), "mse");
  EXPECT_EQ(CreateCudaLoss("mse", 0.1f, 0).status().code(), absl::StatusCode::kInvalidArgument);
  const absl::Status unknown = CreateCudaLoss("hinge", 0.0f, 0).status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("known: mse, softmax_cross_entropy"), std::string::npos)
      << unknown;
}

TEST(CudaLossesHostTest, RefusesOperandsOffTheDevice) {
  auto loss = CreateCudaLoss("softmax_cross_entropy", 0.0f, 0);
  ASSERT_TRUE(loss.ok());
  Tensor z = Tensor::Zeros({3, 4}), y = Tensor::Zeros({3}, DType::kI32);
  const absl::Status s = (*loss)->Compute(z, y, 1.0f, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("on cuda:0"), std::string::npos) << s;
}

}  // namespace
}  // namespace yoke::engine::cuda
