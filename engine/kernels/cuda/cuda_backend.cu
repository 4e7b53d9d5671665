// The CUDA backend of the engine core (engine/device_backend.h), registered
// from a static initialiser: linking the CUDA library (whole-archive, the
// yoke_engine_cuda target) is what gives a binary CUDA tensors, layers,
// losses and optimizers.
#include "common/status.h"
#include "engine/device_backend.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/device_context.h"
#include "engine/kernels/cuda/for_each.cuh"
#include "engine/kernels/cuda/math/arith.h"
#include "engine/losses/cuda/cuda_losses.h"
#include "engine/optim/cuda/cuda_optimizers.h"

namespace yoke::engine::cuda {
namespace {

class CudaBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "cuda"; }

  absl::StatusOr<Allocator*> allocator(int index) override {
    ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(index));
    return ctx->allocator();
  }

  absl::Status Zero(void* p, size_t bytes, int index) override {
    ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(index));
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, bytes, ctx->stream()));
    return absl::OkStatus();
  }

  absl::Status Copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes) override {
    const Device on = dst_device.is_cuda() ? dst_device : src_device;
    ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(on.index));
    cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
    if (dst_device.is_cpu()) kind = cudaMemcpyDeviceToHost;
    if (src_device.is_cpu()) kind = cudaMemcpyHostToDevice;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, kind, ctx->stream()));
    // A copy to the host returns with the bytes in place.
    if (dst_device.is_cpu()) return ctx->Synchronize();
    return absl::OkStatus();
  }

  absl::Status AddInPlace(float* dst, const float* src, int64_t n, int index) override {
    ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(index));
    return LaunchForEach("AddInPlace", n, AddInPlaceFn{dst, src}, ctx->stream());
  }

  absl::Status Synchronize(int index) override {
    ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(index));
    return ctx->Synchronize();
  }

  absl::Status SetPrecision(int index, const std::string& precision) override {
    if (!precision.empty() && precision != "fp32" && precision != "tf32") {
      return absl::InvalidArgumentError(
          absl::StrCat("precision '", precision, "' is not implemented on CUDA yet"));
    }
    ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(index));
    ctx->set_tf32(precision == "tf32");
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Loss>> CreateLoss(const std::string& name, float label_smoothing,
                                                   int index) override {
    return CreateCudaLoss(name, label_smoothing, index);
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(const v1::OptimizerSpec& spec,
                                                             ParamSet* params) override {
    return CreateCudaOptimizer(spec, params);
  }
  absl::StatusOr<double> GradNorm(const ParamSet& params, float grad_scale) override {
    return CudaGradNorm(params, grad_scale);
  }
};

const bool registered = RegisterDeviceBackend(Device::Kind::kCUDA, new CudaBackend());

}  // namespace
}  // namespace yoke::engine::cuda
