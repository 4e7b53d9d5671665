#include "engine/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/device_backend.h"

namespace yoke::engine {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kU8:
      return 1;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
  }
  return "?";
}

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string ShapeString(const Shape& s) { return absl::StrCat("(", absl::StrJoin(s, ", "), ")"); }

Storage::Storage(Allocator* allocator, void* data, size_t bytes)
    : allocator_(allocator), data_(data), bytes_(bytes), device_(allocator->device()) {}

Storage::Storage(void* data, size_t bytes, Device device)
    : allocator_(nullptr), data_(data), bytes_(bytes), device_(device) {}

Storage::~Storage() {
  if (allocator_ != nullptr) allocator_->Deallocate(data_, bytes_);
}

absl::StatusOr<Tensor> Tensor::Allocate(const Shape& shape, DType dtype, Device device,
                                        const std::string& what) {
  Allocator* a = AllocatorFor(device);
  if (a == nullptr && !device.is_cpu()) {
    // The backend says why: no backend in this build, no usable device.
    absl::StatusOr<DeviceBackend*> b = BackendFor(device);
    if (!b.ok()) return common::Annotate(b.status(), absl::StrCat("allocating ", what));
    absl::StatusOr<Allocator*> da = (*b)->allocator(device.index);
    if (!da.ok()) return common::Annotate(da.status(), absl::StrCat("allocating ", what));
    a = *da;
  }
  if (a == nullptr) {
    return absl::UnimplementedError(absl::StrCat("no allocator for device ", device.ToString(),
                                                 " in this build (allocating ", what, ")"));
  }
  const size_t bytes = NumElements(shape) * DTypeSize(dtype);
  void* data = a->Allocate(bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("out of memory: ", bytes, " bytes for ", what,
                                                     " (", a->in_use_bytes(), " bytes in use)"));
  }
  Tensor t;
  t.storage_ = std::make_shared<Storage>(a, data, bytes);
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

absl::StatusOr<Tensor> Tensor::AllocateZeros(const Shape& shape, DType dtype, Device device,
                                             const std::string& what) {
  absl::StatusOr<Tensor> t = Allocate(shape, dtype, device, what);
  if (t.ok()) t->SetZero();
  return t;
}

Tensor Tensor::Empty(const Shape& shape, DType dtype, Device device) {
  absl::StatusOr<Tensor> t =
      Allocate(shape, dtype, device, absl::StrCat("a tensor ", ShapeString(shape)));
  if (!t.ok()) {
    std::fprintf(stderr, "yoke: %s\n", std::string(t.status().message()).c_str());
    std::abort();
  }
  return *std::move(t);
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = Empty(shape, dtype, device);
  t.SetZero();
  return t;
}

Tensor Tensor::Wrap(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.storage_ = std::make_shared<Storage>(data, NumElements(shape) * DTypeSize(dtype), device);
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::View(int64_t offset, const Shape& shape) const {
  size_t begin = offset_ + offset * DTypeSize(dtype_);
  size_t end = begin + NumElements(shape) * DTypeSize(dtype_);
  if (storage_ == nullptr || end > storage_->bytes()) {
    std::fprintf(stderr, "yoke: Tensor::View out of range: %s at %lld of %s\n",
                 ShapeString(shape).c_str(), static_cast<long long>(offset), DebugString().c_str());
    std::abort();
  }
  Tensor t = *this;
  t.offset_ = begin;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::Reshape(const Shape& shape) const {
  if (NumElements(shape) != numel()) {
    std::fprintf(stderr, "yoke: cannot reshape %s to %s\n", ShapeString(shape_).c_str(),
                 ShapeString(shape).c_str());
    std::abort();
  }
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

void Tensor::SetZero() const {
  if (!defined()) return;
  if (device_.is_cpu()) {
    std::memset(raw(), 0, bytes());
    return;
  }
  absl::StatusOr<DeviceBackend*> b = BackendFor(device_);
  absl::Status s = b.ok() ? (*b)->Zero(raw(), bytes(), device_.index) : b.status();
  if (!s.ok()) {
    std::fprintf(stderr, "yoke: SetZero of %s failed: %s\n", DebugString().c_str(),
                 s.ToString().c_str());
    std::abort();
  }
}

void Tensor::CopyFrom(const Tensor& src) const {
  absl::Status s = CopyTensor(*this, src);
  if (!s.ok()) {
    std::fprintf(stderr, "yoke: CopyFrom %s <- %s failed: %s\n", DebugString().c_str(),
                 src.DebugString().c_str(), s.ToString().c_str());
    std::abort();
  }
}

std::string Tensor::DebugString() const {
  if (!defined()) return "Tensor(undefined)";
  return absl::StrCat("Tensor(", DTypeName(dtype_), ShapeString(shape_), " ", device_.ToString(),
                      ")");
}

}  // namespace yoke::engine
