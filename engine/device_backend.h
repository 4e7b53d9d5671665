// DeviceBackend: what the engine core asks of a non-CPU device.
//
// The engine core (tensors, the model graph, parameter sets) is CPU-only code
// and links no device library. A device library (the CUDA backend,
// engine/kernels/cuda/cuda_backend.cu, built by CMake when YOKE_WITH_CUDA is
// on) registers one DeviceBackend per device kind from a static initialiser;
// a binary that does not link it has no backend for that kind, and every
// request for such a device fails with UNIMPLEMENTED naming the build.
//
// Ordering: every operation here is enqueued on the device's compute stream
// (the one stream its layers use), so it is ordered with the kernels around
// it. Copy() to host memory returns once the bytes have landed; every other
// call may return before the device has run it.
//
// Thread-safety: implementations are thread-safe; the registry is written
// only by static initialisers.
#ifndef YOKE_ENGINE_DEVICE_BACKEND_H_
#define YOKE_ENGINE_DEVICE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/allocator.h"
#include "engine/device.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::engine {

class Loss;
class Optimizer;
class ParamSet;
class Tensor;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // The device kind's name in messages ("cuda").
  virtual const char* name() const = 0;

  // The allocator of device `index`, or why there is none (UNAVAILABLE with
  // the driver's reason on a machine without a usable device,
  // INVALID_ARGUMENT for an index the machine does not have).
  virtual absl::StatusOr<Allocator*> allocator(int index) = 0;

  // Sets `bytes` bytes at device pointer `p` to zero.
  virtual absl::Status Zero(void* p, size_t bytes, int index) = 0;

  // Copies `bytes` bytes; at least one side is on this backend's device
  // `index`, the other on it or in host memory.
  virtual absl::Status Copy(void* dst, Device dst_device, const void* src, Device src_device,
                            size_t bytes) = 0;

  // dst[i] += src[i] for i < n, f32, on device `index` (the model's sum of
  // the gradients a node receives from several consumers).
  virtual absl::Status AddInPlace(float* dst, const float* src, int64_t n, int index) = 0;

  // Returns once everything enqueued on device `index` has run, with the
  // first asynchronous error it reported.
  virtual absl::Status Synchronize(int index) = 0;

  // The arithmetic of the matrix products and convolutions that device
  // `index` builds from now on: "fp32" (the default) or "tf32".
  // INVALID_ARGUMENT for a precision this backend does not implement.
  virtual absl::Status SetPrecision(int index, const std::string& precision) = 0;

  // The device implementations of a loss and an optimizer, with the
  // arguments and errors of CreateLoss (engine/losses/loss.h) and
  // CreateOptimizer (engine/optim/optimizer.h).
  virtual absl::StatusOr<std::unique_ptr<Loss>> CreateLoss(const std::string& name,
                                                           float label_smoothing, int index) = 0;
  virtual absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const v1::OptimizerSpec& spec,
                                                                     ParamSet* params) = 0;
  // GradNorm (engine/optim/optimizer.h) of a parameter set on this device.
  virtual absl::StatusOr<double> GradNorm(const ParamSet& params, float grad_scale) = 0;
};

// Called once per kind by the device library's static initialiser; returns
// true. A second registration for the same kind is ignored (returns false).
bool RegisterDeviceBackend(Device::Kind kind, DeviceBackend* backend);

// The backend for `device`'s kind: null for the CPU, which needs none.
// UNIMPLEMENTED "this build has no CUDA backend ..." when none is linked.
absl::StatusOr<DeviceBackend*> BackendFor(Device device);

// Copies src into dst (same dtype and element count) across any pair of
// devices; INVALID_ARGUMENT on a mismatch.
absl::Status CopyTensor(const Tensor& dst, const Tensor& src);

// Waits for everything enqueued on `device` (a no-op for the CPU).
absl::Status SynchronizeDevice(Device device);

// DeviceBackend::SetPrecision for `device`; the CPU takes "fp32" (and "",
// the spec's default) only.
absl::Status SetDevicePrecision(Device device, const std::string& precision);

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_DEVICE_BACKEND_H_
