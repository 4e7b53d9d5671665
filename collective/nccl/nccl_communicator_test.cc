// The NCCL backend (labelled `gpu`). Tests that need a device skip, visibly,
// without one; argument checks run everywhere.
#include "collective/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "engine/kernels/cuda/testing/cuda_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

using ::testing::HasSubstr;

TEST(NcclTest, BadArgumentsAreInvalidArgument) {
  InMemoryStore store;
  EXPECT_EQ(CreateNcclCommunicators(&store, 0, 0, {0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateNcclCommunicators(&store, 2, 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto r = CreateNcclCommunicators(&store, 2, 1, {0, 1});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("ranks 1..2 must lie in [0, 2)"));
}

TEST(NcclTest, NoDeviceIsAClearError) {
  if (::yoke::engine::cuda::NoDeviceReason().empty()) GTEST_SKIP() << "a CUDA device is present";
  InMemoryStore store;
  auto r = CreateNcclCommunicators(&store, 1, 0, {0});
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("cudaGetDeviceCount"));
}

TEST(NcclTest, SingleRankAllreduceBroadcastAllgatherBarrier) {
  SKIP_WITHOUT_CUDA_DEVICE();
  InMemoryStore store;
  auto comms = CreateNcclCommunicators(&store, 1, 0, {0});
  ASSERT_TRUE(comms.ok()) << comms.status();
  NcclCommunicator& c = *(*comms)[0];
  EXPECT_STREQ(c.backend(), "nccl");
  const int64_t n = 1000;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 13);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev), n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  const Buffer buf{dev, n, DataType::kF32, DeviceKind::kCuda, 0};

  // Ordered after an event recorded on another stream, without a host sync.
  cudaStream_t compute;
  cudaEvent_t ready;
  ASSERT_EQ(cudaStreamCreate(&compute), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&ready), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ready, compute), cudaSuccess);
  c.WaitForEventBeforeNextOp(ready);
  AllreduceOptions o;
  o.op = ReduceOp::kAverage;
  auto w = c.Allreduce(buf, o);
  ASSERT_TRUE(w->Wait().ok()) << w->Wait();
  EXPECT_EQ(w->seq(), 1);
  ASSERT_TRUE(c.Broadcast(buf, 0, {})->Wait().ok());
  float* gathered = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&gathered), n * sizeof(float)), cudaSuccess);
  ASSERT_TRUE(
      c.Allgather(buf, Buffer{gathered, n, DataType::kF32, DeviceKind::kCuda, 0}, {})->Wait().ok());
  ASSERT_TRUE(c.Barrier({})->Wait().ok());
  EXPECT_EQ(c.completed_seq(), 4);
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), gathered, n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back, host);

  // CPU buffers and wire compression are refused.
  EXPECT_EQ(c.Allreduce(Buffer{host.data(), n}, {})->Wait().code(),
            absl::StatusCode::kInvalidArgument);
  AllreduceOptions f16;
  f16.wire = DataType::kF16;
  EXPECT_EQ(c.Allreduce(buf, f16)->Wait().code(), absl::StatusCode::kUnimplemented);

  c.Abort("test abort");
  auto after = c.Barrier({});
  EXPECT_EQ(after->Wait().code(), absl::StatusCode::kAborted);
  comms->clear();
  cudaFree(dev);
  cudaFree(gathered);
  cudaEventDestroy(ready);
  cudaStreamDestroy(compute);
}

}  // namespace
}  // namespace yoke::collective
