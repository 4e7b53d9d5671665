#include "engine/kernels/cuda/batch_norm_kernels.h"
#include "engine/kernels/cuda/for_each.cuh"

namespace yoke::engine::cuda {
namespace {

// The sequences' runner on the device: launches, keeps the first error.
struct DeviceRunner {
  cudaStream_t stream;
  absl::Status status;
  template <typename F>
  bool operator()(const char* what, int64_t n, const F& f) {
    status.Update(LaunchForEach(what, n, f, stream));  // keeps the first error
    return status.ok();
  }
};

}  // namespace

absl::Status LaunchBnForwardTraining(const BnBuffers& b, const BnParams& p, const float* x,
                                     float* y, cudaStream_t stream) {
  DeviceRunner run{stream, absl::OkStatus()};
  BnForwardTraining(run, b, p, x, y);
  return run.status;
}

absl::Status LaunchBnForwardInference(const BnBuffers& b, const BnParams& p, const float* x,
                                      float* y, cudaStream_t stream) {
  DeviceRunner run{stream, absl::OkStatus()};
  BnForwardInference(run, b, p, x, y);
  return run.status;
}

absl::Status LaunchBnBackward(const BnBuffers& b, const BnParams& p, bool training, const float* x,
                              const float* dy, float* dx, float* dgamma, float* dbeta,
                              cudaStream_t stream) {
  DeviceRunner run{stream, absl::OkStatus()};
  BnBackward(run, b, p, training, x, dy, dx, dgamma, dbeta);
  return run.status;
}

}  // namespace yoke::engine::cuda
