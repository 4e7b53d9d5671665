// CUDA kernels against their CPU references (labelled `gpu`; each test that
// needs a device skips, visibly, when there is none).
#include "engine/kernels/cuda/elementwise.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/kernels/cuda/cublas_check.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/testing/cuda_test_util.h"
#include "engine/layers/activation.h"
#include "engine/optim/sgd.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

std::vector<float> Random(int64_t n, uint64_t stream, float lo, float hi) {
  return testing::UniformVector(n, 77, stream, lo, hi);
}

// A device buffer freed on scope exit.
struct DeviceBuffer {
  float* ptr = nullptr;
  explicit DeviceBuffer(const std::vector<float>& host) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), host.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<float> Download(size_t n) const {
    std::vector<float> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

// Runs without a device: the error conversion itself.
absl::Status FailingCall() {
  CUDA_RETURN_IF_ERROR(cudaErrorInvalidValue);
  return absl::OkStatus();
}
absl::Status FailingCublasCall() {
  CUBLAS_RETURN_IF_ERROR(CUBLAS_STATUS_ALLOC_FAILED);
  return absl::OkStatus();
}

TEST(CudaCheckTest, ConvertsErrorsWithCallTextFileAndLine) {
  absl::Status s = FailingCall();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  const std::string msg(s.message());
  EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
  EXPECT_NE(msg.find("elementwise_test.cc:"), std::string::npos) << msg;
  absl::Status b = FailingCublasCall();
  EXPECT_EQ(b.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(b.message()).find("CUBLAS_STATUS_ALLOC_FAILED"), std::string::npos) << b;
  EXPECT_TRUE(cuda::CudaErrorToStatus(cudaSuccess, "x", "f", 1).ok());
  EXPECT_EQ(cuda::CudaErrorToStatus(cudaErrorNoDevice, "x", "f", 1).code(),
            absl::StatusCode::kUnavailable);
}

TEST(CudaElementwiseTest, ReluMatchesCpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t n = (1 << 20) + 3;  // not a multiple of the block size
  std::vector<float> x = Random(n, 1, -2.0f, 2.0f);
  DeviceBuffer dx(x), dy(std::vector<float>(n, -1.0f));
  ASSERT_TRUE(cuda::ReluForward(dx.ptr, dy.ptr, n, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> gpu = dy.Download(n);

  ActivationLayer relu(ActivationLayer::Kind::kRelu);
  ParamSet p;
  ASSERT_TRUE(relu.Build({{n}}, &p).ok());
  Tensor xt = Tensor::Wrap(x.data(), {1, n});
  Tensor yt = Tensor::Empty({1, n});
  ASSERT_TRUE(relu.Forward({&xt}, &yt, {}).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gpu[i], yt.data<float>()[i]) << i;
  EXPECT_TRUE(cuda::ReluForward(dx.ptr, dy.ptr, 0, nullptr).ok());
  EXPECT_EQ(cuda::ReluForward(dx.ptr, dy.ptr, -1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaElementwiseTest, SgdMomentumStepMatchesCpu) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int64_t n = 300007;
  for (bool nesterov : {false, true}) {
    for (float momentum : {0.0f, 0.9f}) {
      if (nesterov && momentum == 0.0f) continue;
      SCOPED_TRACE(::testing::Message() << "nesterov " << nesterov << " momentum " << momentum);
      std::vector<float> p = Random(n, 2, -1.0f, 1.0f), v(n, 0.0f);
      DeviceBuffer dp(p), dv(v), dg(std::vector<float>(n, 0.0f));
      SgdOptions o;
      o.momentum = momentum;
      o.nesterov = nesterov;
      o.weight_decay = 1e-2f;
      for (int step = 0; step < 3; ++step) {
        std::vector<float> g = Random(n, 10 + step, -0.5f, 0.5f);
        ASSERT_EQ(cudaMemcpy(dg.ptr, g.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                  cudaSuccess);
        const float lr = 0.1f / (step + 1);
        ASSERT_TRUE(cuda::SgdMomentumStep(dp.ptr, dg.ptr, momentum > 0 ? dv.ptr : nullptr, n, lr,
                                          momentum, o.weight_decay, nesterov, nullptr)
                        .ok());
        SgdUpdate(o, lr, p.data(), g.data(), momentum > 0 ? v.data() : nullptr, n);
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> gp = dp.Download(n), gv = dv.Download(n);
      // FMA contraction on the GPU changes the last bits only.
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(gp[i], p[i], 1e-5f * (1.0f + std::fabs(p[i]))) << "p " << i;
        if (momentum > 0) {
          ASSERT_NEAR(gv[i], v[i], 1e-5f * (1.0f + std::fabs(v[i]))) << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace yoke::engine::cuda
