// Tensor: a typed, shaped view of a device buffer.
//
// A Tensor is a cheap handle: copies share the same Storage (reference
// counted), and View()/Reshape() alias it. This is what lets a model keep every
// parameter (and every gradient) as a view into one flat buffer, so the reducer
// can bucket gradients without copies.
//
// Activations are channels-last: images are (N, H, W, C).
//
// Thread-safety: a Tensor handle may be copied across threads; concurrent
// writes to the same elements are the caller's business.
#ifndef YOKE_ENGINE_TENSOR_H_
#define YOKE_ENGINE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/allocator.h"
#include "engine/device.h"

namespace yoke::engine {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8 };

size_t DTypeSize(DType t);
const char* DTypeName(DType t);

using Shape = std::vector<int64_t>;

// Product of the dimensions (1 for a scalar shape {}).
int64_t NumElements(const Shape& s);
// "(64, 28, 28, 1)".
std::string ShapeString(const Shape& s);

// Owns one allocation; frees it through its allocator.
class Storage {
 public:
  // Takes ownership of `data` (`bytes` long), which `allocator` returned.
  Storage(Allocator* allocator, void* data, size_t bytes);
  // Non-owning: wraps memory that outlives this Storage.
  Storage(void* data, size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Allocator* allocator_;  // null when not owning
  void* data_;
  size_t bytes_;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised tensor for buffers whose size the job controls (parameters,
  // activations, gradients). `what` names the user for the error, e.g.
  // "layer conv1". Fails with RESOURCE_EXHAUSTED "out of memory: N bytes for
  // <what> (M bytes in use)" when the device's allocator cannot provide the
  // bytes (M: what it has handed out already), or with UNIMPLEMENTED when the
  // device has no allocator in this build.
  static absl::StatusOr<Tensor> Allocate(const Shape& shape, DType dtype, Device device,
                                         const std::string& what);
  // As Allocate, then every byte zero.
  static absl::StatusOr<Tensor> AllocateZeros(const Shape& shape, DType dtype, Device device,
                                              const std::string& what);

  // Uninitialised tensor, for small fixed-size buffers and tests. Allocation
  // failure is fatal, like operator new; use Allocate where it may fail.
  static Tensor Empty(const Shape& shape, DType dtype = DType::kF32, Device device = Device::CPU());
  static Tensor Zeros(const Shape& shape, DType dtype = DType::kF32, Device device = Device::CPU());
  // A non-owning tensor over `data`, which must outlive it.
  static Tensor Wrap(void* data, const Shape& shape, DType dtype = DType::kF32,
                     Device device = Device::CPU());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i < 0 ? shape_.size() + i : i]; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return NumElements(shape_); }
  size_t bytes() const { return numel() * DTypeSize(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }

  // A tensor of `shape` aliasing this one's storage, starting `offset`
  // elements in. Requires the view to fit inside the storage.
  Tensor View(int64_t offset, const Shape& shape) const;
  // Same elements, another shape with the same element count.
  Tensor Reshape(const Shape& shape) const;

  // Sets every byte to zero. (Handles are shallow: const methods may write
  // the elements, never the handle.) On a device, enqueued on its compute
  // stream (engine/device_backend.h). A failure is fatal; code that can
  // report one calls the backend itself.
  void SetZero() const;
  // Copies the elements of `src` (same dtype and numel), between any two
  // devices, as CopyTensor (engine/device_backend.h) does; a mismatch or a
  // device error is fatal.
  void CopyFrom(const Tensor& src) const;
  // True when both tensors alias the same storage.
  bool SharesStorageWith(const Tensor& o) const { return storage_ == o.storage_; }

  std::string DebugString() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_TENSOR_H_
