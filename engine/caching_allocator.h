// CachingAllocator: keeps freed device memory for reuse, so a training step
// in steady state makes no device allocation call (cudaMalloc synchronises
// the device and costs ~0.1-1 ms; a step allocates hundreds of tensors).
//
// The allocator is device-agnostic: it carves blocks out of segments that
// it gets from a DeviceMemory (cudaMalloc/cudaFree for a GPU,
// engine/kernels/cuda/cuda_allocator.h; a counting fake in tests).
//   - Sizes are rounded up to 512 bytes (every block stays 512-byte aligned,
//     enough for vectorised loads and cuBLAS/cuDNN).
//   - Small requests (<= 1 MiB) share 2 MiB segments; larger ones get a
//     segment of their size rounded up to 2 MiB. The two pools never mix, so
//     small short-lived tensors do not fragment the large segments.
//   - A request takes the smallest free block that fits (best fit) and splits
//     off the rest when at least 512 bytes (small) or 1 MiB (large) remain.
//   - A freed block merges with free neighbours of its segment.
//   - When the device refuses a segment, every fully free segment is
//     returned to the device and the request is tried once more; if it still
//     fails, Allocate returns null and last_error() says how much was asked,
//     in use and cached.
// Segments are never returned otherwise (EmptyCache() returns the free ones).
//
// Streams: blocks are for the allocator's one compute stream. A block handed
// to work on another stream (a gradient bucket on the NCCL stream) must not
// be freed before that work is done; the reducer's buffers live as long as
// the model, so this holds for them.
//
// Thread-safety: thread-safe (one mutex; replicas of one device share it).
#ifndef YOKE_ENGINE_CACHING_ALLOCATOR_H_
#define YOKE_ENGINE_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/allocator.h"

namespace yoke::engine {

// Raw device memory: what the caching allocator sits on.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // `bytes` (> 0) of device memory, or RESOURCE_EXHAUSTED / INTERNAL with the
  // device's message.
  virtual absl::StatusOr<void*> Malloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual Device device() const = 0;
};

struct CachingAllocatorStats {
  size_t in_use_bytes = 0;     // handed out now (rounded sizes)
  size_t peak_bytes = 0;       // the most ever handed out at once
  size_t reserved_bytes = 0;   // held from the device (segments)
  int64_t device_mallocs = 0;  // DeviceMemory::Malloc calls that succeeded
  int64_t device_frees = 0;    // segments given back
  int64_t allocations = 0;     // Allocate calls that succeeded
};

class CachingAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 512;
  static constexpr size_t kSmallMax = size_t{1} << 20;       // small pool: <= 1 MiB
  static constexpr size_t kSmallSegment = size_t{2} << 20;   // one small segment
  static constexpr size_t kLargeRound = size_t{2} << 20;     // large segments round to
  static constexpr size_t kLargeMinSplit = size_t{1} << 20;  // large remainder kept apart

  explicit CachingAllocator(std::unique_ptr<DeviceMemory> memory);
  ~CachingAllocator() override;  // returns every segment to the device

  // Allocator. Allocate(0) returns a distinct 512-byte block.
  void* Allocate(size_t bytes) override;
  // `p` must come from Allocate and not be freed yet; anything else is
  // logged and ignored (never a crash, never a double entry).
  void Deallocate(void* p, size_t bytes) override;
  Device device() const override;
  size_t in_use_bytes() const override;
  size_t peak_bytes() const override;

  CachingAllocatorStats stats() const;
  // Why the last failed Allocate failed ("" if none did).
  std::string last_error() const;
  // Returns every fully free segment to the device.
  void EmptyCache();

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    bool free = true;
    bool small = false;
    char* segment = nullptr;  // the segment's base
    Block* prev = nullptr;    // neighbours within the segment, by address
    Block* next = nullptr;
  };
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using Pool = std::set<Block*, BySizeThenAddress>;

  Block* TakeFree(Pool& pool, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* NewSegment(size_t size, bool small) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseFreeSegments() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Folds `right`, the free block just after `left` in its segment, into
  // `left` and deletes it. Neither may be in a pool.
  static void Absorb(Block* left, Block* right);

  const std::unique_ptr<DeviceMemory> memory_;
  mutable absl::Mutex mu_;
  Pool small_free_ ABSL_GUARDED_BY(mu_), large_free_ ABSL_GUARDED_BY(mu_);
  std::map<char*, Block*> live_ ABSL_GUARDED_BY(mu_);      // handed out, by address
  std::map<char*, size_t> segments_ ABSL_GUARDED_BY(mu_);  // base -> size
  CachingAllocatorStats stats_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_CACHING_ALLOCATOR_H_
