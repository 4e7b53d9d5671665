#include "engine/kernels/cuda/device_context.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status.h"
#include "engine/kernels/cuda/cublas_check.h"
#include "engine/kernels/cuda/cuda_allocator.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/cudnn_check.h"

namespace yoke::engine::cuda {

DeviceContext::~DeviceContext() {
  // Contexts live as long as the process; this runs only if creation failed
  // half way.
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublaslt_ != nullptr) cublasLtDestroy(cublaslt_);
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::StatusOr<cublasLtHandle_t> DeviceContext::cublaslt() {
  if (cublaslt_ == nullptr) CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&cublaslt_));
  return cublaslt_;
}

absl::StatusOr<cudnnHandle_t> DeviceContext::cudnn() {
  if (cudnn_ == nullptr) {
    cudnnHandle_t h = nullptr;
    CUDNN_RETURN_IF_ERROR(cudnnCreate(&h));
    absl::Status s = CudnnErrorToStatus(cudnnSetStream(h, stream_), "cudnnSetStream(h, stream)",
                                        __FILE__, __LINE__);
    if (!s.ok()) {
      cudnnDestroy(h);
      return s;
    }
    cudnn_ = h;
  }
  return cudnn_;
}

absl::StatusOr<void*> DeviceContext::Workspace(size_t bytes, const char* what) {
  if (bytes <= workspace_bytes_) return workspace_;
  if (workspace_ != nullptr) allocator_->Deallocate(workspace_, workspace_bytes_);
  workspace_ = allocator_->Allocate(bytes);
  if (workspace_ == nullptr) {
    workspace_bytes_ = 0;
    return absl::ResourceExhaustedError(
        absl::StrCat("out of device memory: ", bytes, " bytes of workspace for ", what,
                     " on cuda:", device_, " (", allocator_->in_use_bytes(), " bytes in use)"));
  }
  workspace_bytes_ = bytes;
  return workspace_;
}

absl::StatusOr<void*> DeviceContext::PinnedScratch(size_t bytes) {
  if (bytes <= pinned_bytes_) return pinned_;
  // The old buffer may still be the target of a copy in flight.
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  pinned_ = nullptr;
  pinned_bytes_ = 0;
  CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned_, bytes));
  pinned_bytes_ = bytes;
  return pinned_;
}

absl::Status DeviceContext::Synchronize() {
  ++synchronizations_;
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::StatusOr<DeviceContext*> ContextFor(int index) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* contexts = new std::map<int, DeviceContext*>();  // never freed
  ASSIGN_OR_RETURN(CachingAllocator * allocator, CudaAllocator(index));
  CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  absl::MutexLock l(&mu);
  DeviceContext*& c = (*contexts)[index];
  if (c == nullptr) {
    auto fresh = std::unique_ptr<DeviceContext>(new DeviceContext());
    fresh->device_ = index;
    fresh->allocator_ = allocator;
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&fresh->stream_, cudaStreamNonBlocking));
    c = fresh.release();
  }
  return c;
}

}  // namespace yoke::engine::cuda
