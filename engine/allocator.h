// Allocator: the interface behind every tensor buffer.
//
// The CPU allocator returns 64-byte aligned memory (one cache line, and enough
// for AVX-512 loads). A caching CUDA allocator plugs in behind the same
// interface. Implementations must be thread-safe.
#ifndef YOKE_ENGINE_ALLOCATOR_H_
#define YOKE_ENGINE_ALLOCATOR_H_

#include <atomic>
#include <cstddef>

#include "engine/device.h"

namespace yoke::engine {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns `bytes` of memory, or null when it cannot.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Deallocate(void* p, size_t bytes) = 0;
  virtual Device device() const = 0;
  // Bytes currently handed out, and the most ever handed out at once.
  virtual size_t in_use_bytes() const = 0;
  virtual size_t peak_bytes() const = 0;
};

// The process-wide CPU allocator.
Allocator* CpuAllocator();

// Returns the allocator for `device`; CUDA devices come from the CUDA backend.
Allocator* AllocatorFor(Device device);

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_ALLOCATOR_H_
