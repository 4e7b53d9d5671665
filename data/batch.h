// Batch: one rank's share of one training step, ready for the model.
//
// `x` holds n examples as contiguous floats, (n, example_shape...) row-major,
// i.e. (n, H, W, C) for images; `y` holds their labels. The trainer wraps
// x.data() in a Tensor without copying; the buffer is 64-byte aligned, like
// the engine's CPU allocator, so kernels see the same alignment either way.
#ifndef YOKE_DATA_BATCH_H_
#define YOKE_DATA_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace yoke::data {

// std::allocator, but 64-byte aligned (one cache line; enough for AVX-512).
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  static constexpr size_t kAlignment = 64;

  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}

  // Failure behaves like std::allocator (operator new).
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kAlignment}));
  }
  void deallocate(T* p, size_t) { ::operator delete (p, std::align_val_t{kAlignment}); }

  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const AlignedAllocator<U>&) const {
    return false;
  }
};

using FloatBuffer = std::vector<float, AlignedAllocator<float>>;

struct Batch {
  FloatBuffer x;                       // (n, example_shape...)
  std::vector<int32_t> y;              // (n)
  int64_t n = 0;                       // examples on this rank; may be 0 in a short last step
  std::vector<int64_t> example_shape;  // e.g. (28, 28, 1)
  int64_t epoch = 0;
  int64_t step = 0;              // within the epoch
  int64_t global_n = 0;          // examples in this step over all ranks
  bool last_in_epoch = false;    // step == steps_per_epoch - 1
  std::vector<int64_t> indices;  // dataset indices of the n examples

  // (n, example_shape...).
  std::vector<int64_t> x_shape() const {
    std::vector<int64_t> s{n};
    s.insert(s.end(), example_shape.begin(), example_shape.end());
    return s;
  }
};

}  // namespace yoke::data

#endif  // YOKE_DATA_BATCH_H_
