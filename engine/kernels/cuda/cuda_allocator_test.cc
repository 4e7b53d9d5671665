// The caching allocator over real cudaMalloc (labelled `gpu`; skips, visibly,
// without a device). The block logic itself is tested on any machine in
// engine/caching_allocator_test.cc.
#include "engine/kernels/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <vector>

#include "engine/kernels/cuda/testing/cuda_test_util.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

TEST(CudaAllocatorTest, RepeatedStepsCallCudaMallocOnlyInTheFirst) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto a = cuda::CudaAllocator(0);
  ASSERT_TRUE(a.ok()) << a.status();
  const std::vector<size_t> sizes = {256, 4 << 20, 1000, 30 << 20, 64 << 10};
  int64_t after_first = 0;
  for (int step = 0; step < 4; ++step) {
    std::vector<void*> ptrs;
    for (size_t s : sizes) {
      void* p = (*a)->Allocate(s);
      ASSERT_NE(p, nullptr) << (*a)->last_error();
      // The memory is real device memory: write it, read it back.
      ASSERT_EQ(cudaMemset(p, step + 1, s), cudaSuccess);
      unsigned char last = 0;
      ASSERT_EQ(cudaMemcpy(&last, static_cast<char*>(p) + s - 1, 1, cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(last, step + 1);
      ptrs.push_back(p);
    }
    for (size_t i = 0; i < ptrs.size(); ++i) (*a)->Deallocate(ptrs[i], sizes[i]);
    if (step == 0) after_first = (*a)->stats().device_mallocs;
  }
  EXPECT_GT(after_first, 0);
  EXPECT_EQ((*a)->stats().device_mallocs, after_first);
  EXPECT_EQ((*a)->in_use_bytes(), 0u);
  (*a)->EmptyCache();
  EXPECT_EQ((*a)->stats().reserved_bytes, 0u);
}

TEST(CudaAllocatorTest, OutOfMemoryIsNullWithAReason) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto a = cuda::CudaAllocator(0);
  ASSERT_TRUE(a.ok()) << a.status();
  // Far more than any GPU has.
  EXPECT_EQ((*a)->Allocate(size_t{1} << 50), nullptr);
  EXPECT_NE((*a)->last_error().find("out of memory on cuda:0"), std::string::npos)
      << (*a)->last_error();
}

TEST(CudaAllocatorTest, AnUnknownDeviceIsInvalidArgument) {
  SKIP_WITHOUT_CUDA_DEVICE();
  auto a = cuda::CudaAllocator(4096);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << a.status();
}

}  // namespace
}  // namespace yoke::engine::cuda
