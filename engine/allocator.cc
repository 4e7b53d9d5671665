#include "engine/allocator.h"

#include <cstdlib>

namespace yoke::engine {
namespace {

class AlignedCpuAllocator final : public Allocator {
 public:
  void* Allocate(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p != nullptr) {
      size_t now = in_use_.fetch_add(bytes) + bytes;
      size_t peak = peak_.load();
      while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
      }
    }
    return p;
  }
  void Deallocate(void* p, size_t bytes) override {
    if (p == nullptr) return;
    in_use_.fetch_sub(bytes);
    std::free(p);
  }
  Device device() const override { return Device::CPU(); }
  size_t in_use_bytes() const override { return in_use_.load(); }
  size_t peak_bytes() const override { return peak_.load(); }

 private:
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

}  // namespace

Allocator* CpuAllocator() {
  static Allocator* a = new AlignedCpuAllocator();
  return a;
}

Allocator* AllocatorFor(Device device) {
  if (device.is_cpu()) return CpuAllocator();
  // CUDA tensors arrive with the CUDA backend (issue 5); until then there is
  // no allocator for them and Tensor::Empty reports that.
  return nullptr;
}

}  // namespace yoke::engine
