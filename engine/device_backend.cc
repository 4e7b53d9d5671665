#include "engine/device_backend.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/tensor.h"

namespace yoke::engine {
namespace {

DeviceBackend*& CudaSlot() {
  static DeviceBackend* backend = nullptr;
  return backend;
}

}  // namespace

bool RegisterDeviceBackend(Device::Kind kind, DeviceBackend* backend) {
  if (kind != Device::Kind::kCUDA || CudaSlot() != nullptr) return false;
  CudaSlot() = backend;
  return true;
}

absl::StatusOr<DeviceBackend*> BackendFor(Device device) {
  if (device.is_cpu()) return nullptr;
  if (CudaSlot() == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat(device.ToString(),
                     ": this build has no CUDA backend (build with CMake and YOKE_WITH_CUDA=ON, "
                     "which needs the CUDA toolkit; see docs/gpu.md)"));
  }
  return CudaSlot();
}

absl::Status CopyTensor(const Tensor& dst, const Tensor& src) {
  if (!dst.defined() || !src.defined() || dst.numel() != src.numel() ||
      dst.dtype() != src.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy ", src.DebugString(), " into ", dst.DebugString()));
  }
  if (dst.bytes() == 0) return absl::OkStatus();
  if (dst.device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(dst.raw(), src.raw(), dst.bytes());
    return absl::OkStatus();
  }
  const Device on = dst.device().is_cpu() ? src.device() : dst.device();
  ASSIGN_OR_RETURN(DeviceBackend * b, BackendFor(on));
  return b->Copy(dst.raw(), dst.device(), src.raw(), src.device(), dst.bytes());
}

absl::Status SetDevicePrecision(Device device, const std::string& precision) {
  if (device.is_cpu()) {
    if (precision.empty() || precision == "fp32") return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("precision '", precision, "' is not implemented on the CPU"));
  }
  ASSIGN_OR_RETURN(DeviceBackend * b, BackendFor(device));
  return b->SetPrecision(device.index, precision);
}

absl::Status SynchronizeDevice(Device device) {
  if (device.is_cpu()) return absl::OkStatus();
  ASSIGN_OR_RETURN(DeviceBackend * b, BackendFor(device));
  return b->Synchronize(device.index);
}

}  // namespace yoke::engine
