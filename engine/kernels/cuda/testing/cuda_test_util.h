// For gpu-labelled tests: skip, visibly, when no CUDA device is usable.
//
//   TEST(Foo, Bar) { SKIP_WITHOUT_CUDA_DEVICE(); ... }
//
// Header-only; include it only from tests compiled with the CUDA headers (the
// kernels' tests here, collective/nccl/nccl_communicator_test.cc).
#ifndef YOKE_ENGINE_KERNELS_CUDA_TESTING_CUDA_TEST_UTIL_H_
#define YOKE_ENGINE_KERNELS_CUDA_TESTING_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <string>

#include "gtest/gtest.h"

namespace yoke::engine::cuda {

// Empty when a device is usable, else why not.
inline std::string NoDeviceReason() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for later tests
    return std::string("no usable CUDA device: cudaGetDeviceCount returned ") + cudaGetErrorName(e);
  }
  if (count == 0) return "no CUDA device present (cudaGetDeviceCount = 0)";
  return "";
}

}  // namespace yoke::engine::cuda

#define SKIP_WITHOUT_CUDA_DEVICE()                                     \
  do {                                                                 \
    const std::string reason = ::yoke::engine::cuda::NoDeviceReason(); \
    if (!reason.empty()) GTEST_SKIP() << reason;                       \
  } while (0)

#endif  // YOKE_ENGINE_KERNELS_CUDA_TESTING_CUDA_TEST_UTIL_H_
