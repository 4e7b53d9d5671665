#include "engine/kernels/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "engine/kernels/cuda/cuda_check.h"

namespace yoke::engine::cuda {
namespace {

// Makes `index` the calling thread's current device until destruction.
class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != index) status_ = CUDA_STATUS(cudaSetDevice(index));
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int index) : index_(index) {}
  absl::StatusOr<void*> Malloc(size_t bytes) override {
    DeviceScope scope(index_);
    RETURN_IF_ERROR(scope.status());
    void* p = nullptr;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    return p;
  }
  void Free(void* p) override {
    DeviceScope scope(index_);
    cudaFree(p);  // nothing to do about a failure here but lose the memory
  }
  Device device() const override { return Device::CUDA(index_); }

 private:
  const int index_;
};

}  // namespace

std::unique_ptr<DeviceMemory> NewCudaDeviceMemory(int index) {
  return std::make_unique<CudaDeviceMemory>(index);
}

absl::StatusOr<CachingAllocator*> CudaAllocator(int index) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* allocators = new std::map<int, CachingAllocator*>();  // never freed
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (index < 0 || index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda:", index, ": no such device (this machine has ", count, ")"));
  }
  absl::MutexLock l(&mu);
  CachingAllocator*& a = (*allocators)[index];
  if (a == nullptr) a = new CachingAllocator(NewCudaDeviceMemory(index));
  return a;
}

}  // namespace yoke::engine::cuda
