// DeviceContext: what every CUDA layer, loss and optimizer of one device
// shares: the device's compute stream, its cuBLASLt and cuDNN handles, a
// growing workspace and the device's caching allocator.
//
// One context per device for the whole process, created on first use. A
// trainer runs one replica per device, so a context is used by one replica
// thread at a time: its stream orders all of that replica's work, and the
// caching allocator's one-stream rule (engine/caching_allocator.h) holds.
//
// Every kernel, copy and library call of the engine on device i goes to
// ContextFor(i)->stream(). ContextFor also makes device i the calling
// thread's current device, so a layer calls it first.
//
// Thread-safety: ContextFor is thread-safe. A context's methods are not:
// they belong to the one replica thread that drives the device.
#ifndef YOKE_ENGINE_KERNELS_CUDA_DEVICE_CONTEXT_H_
#define YOKE_ENGINE_KERNELS_CUDA_DEVICE_CONTEXT_H_

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/caching_allocator.h"

namespace yoke::engine::cuda {

class DeviceContext {
 public:
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  // The compute stream (non-blocking with respect to the legacy default
  // stream).
  cudaStream_t stream() const { return stream_; }
  CachingAllocator* allocator() const { return allocator_; }

  // Created on first use; UNAVAILABLE / INTERNAL with the library's
  // status name when creation fails.
  absl::StatusOr<cublasLtHandle_t> cublaslt();
  absl::StatusOr<cudnnHandle_t> cudnn();  // bound to stream()

  // Device scratch of at least `bytes`, valid until the next call (work
  // enqueued on stream() before that call may still be using the old one:
  // stream order keeps it safe, as the allocator's rule does). Grows, never
  // shrinks. RESOURCE_EXHAUSTED naming `what` when it cannot grow.
  absl::StatusOr<void*> Workspace(size_t bytes, const char* what);

  // Pinned host scratch of at least `bytes` (for scalars read back: a loss
  // sum, a norm). Same validity rule as Workspace.
  absl::StatusOr<void*> PinnedScratch(size_t bytes);

  // Waits for stream(), returning the first asynchronous error. Counted:
  // a steady-state step should call it only where it must read a result.
  absl::Status Synchronize();
  int64_t synchronizations() const { return synchronizations_; }

  // Whether matrix products and convolutions made from now on may use TF32
  // (training.precision: tf32). Off by default: fp32 arithmetic.
  bool tf32() const { return tf32_; }
  void set_tf32(bool on) { tf32_ = on; }

 private:
  friend absl::StatusOr<DeviceContext*> ContextFor(int index);
  DeviceContext() = default;

  int device_ = 0;
  bool tf32_ = false;
  cudaStream_t stream_ = nullptr;
  CachingAllocator* allocator_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  int64_t synchronizations_ = 0;
};

// The context of device `index`, created on first use; makes `index` the
// calling thread's current device. UNAVAILABLE with cudart's reason when
// the machine has no usable device, INVALID_ARGUMENT for an index it does
// not have.
absl::StatusOr<DeviceContext*> ContextFor(int index);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_DEVICE_CONTEXT_H_
