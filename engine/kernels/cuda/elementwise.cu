#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/elementwise.h"

namespace yoke::engine::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops with a bounded grid: enough blocks to fill an H100
// (132 SMs x 8 resident blocks of 256) without a launch per 256 elements.
constexpr int64_t kMaxBlocks = 4096;

int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// No __restrict__: in-place use (x == y) is allowed.
__global__ void ReluForwardKernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    y[i] = fmaxf(x[i], 0.0f);
  }
}

// Nesterov and plain momentum differ by one term; a template keeps the
// branch out of the loop.
template <bool kNesterov>
__global__ void SgdMomentumKernel(float* __restrict__ p, const float* __restrict__ grad,
                                  float* __restrict__ v, int64_t n, float lr, float mu, float wd) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    const float pi = p[i];
    const float g = grad[i] + wd * pi;
    const float vi = mu * v[i] + g;
    v[i] = vi;
    p[i] = pi - lr * (kNesterov ? g + mu * vi : vi);
  }
}

__global__ void SgdPlainKernel(float* __restrict__ p, const float* __restrict__ grad, int64_t n,
                               float lr, float wd) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{blockDim.x} * gridDim.x) {
    p[i] -= lr * (grad[i] + wd * p[i]);
  }
}

absl::Status CheckSize(const char* what, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": n must be >= 0, got ", n));
  return absl::OkStatus();
}

}  // namespace

absl::Status ReluForward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (absl::Status s = CheckSize("cuda::ReluForward", n); !s.ok() || n == 0) return s;
  ReluForwardKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, n);
  CUDA_RETURN_IF_LAUNCH_FAILED(ReluForwardKernel);
  return absl::OkStatus();
}

absl::Status SgdMomentumStep(float* p, const float* grad, float* v, int64_t n, float lr,
                             float momentum, float weight_decay, bool nesterov,
                             cudaStream_t stream) {
  if (absl::Status s = CheckSize("cuda::SgdMomentumStep", n); !s.ok() || n == 0) return s;
  if (momentum == 0.0f) {
    SgdPlainKernel<<<Blocks(n), kThreads, 0, stream>>>(p, grad, n, lr, weight_decay);
    CUDA_RETURN_IF_LAUNCH_FAILED(SgdPlainKernel);
    return absl::OkStatus();
  }
  if (v == nullptr) {
    return absl::InvalidArgumentError(
        "cuda::SgdMomentumStep: momentum buffer is null with momentum > 0");
  }
  if (nesterov) {
    SgdMomentumKernel<true>
        <<<Blocks(n), kThreads, 0, stream>>>(p, grad, v, n, lr, momentum, weight_decay);
    CUDA_RETURN_IF_LAUNCH_FAILED(SgdMomentumKernel<true>);
  } else {
    SgdMomentumKernel<false>
        <<<Blocks(n), kThreads, 0, stream>>>(p, grad, v, n, lr, momentum, weight_decay);
    CUDA_RETURN_IF_LAUNCH_FAILED(SgdMomentumKernel<false>);
  }
  return absl::OkStatus();
}

}  // namespace yoke::engine::cuda
