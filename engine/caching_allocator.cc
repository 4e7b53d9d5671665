#include "engine/caching_allocator.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace yoke::engine {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string MiB(size_t bytes) {
  return absl::StrCat(static_cast<double>(bytes) / (1 << 20), " MiB");
}

}  // namespace

CachingAllocator::CachingAllocator(std::unique_ptr<DeviceMemory> memory)
    : memory_(std::move(memory)) {}

CachingAllocator::~CachingAllocator() {
  absl::MutexLock l(&mu_);
  if (!live_.empty()) {
    spdlog::warn("caching allocator for {}: {} blocks still in use at destruction",
                 memory_->device().ToString(), live_.size());
  }
  // Blocks are owned through the pools and the live map; segments by base.
  std::vector<Block*> all(small_free_.begin(), small_free_.end());
  all.insert(all.end(), large_free_.begin(), large_free_.end());
  for (auto& [p, b] : live_) all.push_back(b);
  for (Block* b : all) delete b;
  for (auto& [base, size] : segments_) memory_->Free(base);
}

CachingAllocator::Block* CachingAllocator::TakeFree(Pool& pool, size_t size) {
  Block key;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);  // smallest block of at least `size`
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::NewSegment(size_t size, bool small) {
  absl::StatusOr<void*> p = memory_->Malloc(size);
  if (!p.ok()) {
    // Give the cache back and try once more before failing.
    ReleaseFreeSegments();
    p = memory_->Malloc(size);
  }
  if (!p.ok()) {
    last_error_ =
        absl::StrCat("out of memory on ", memory_->device().ToString(),
                     ": could not get a segment of ", MiB(size), " (", p.status().message(),
                     "); in use ", MiB(stats_.in_use_bytes), ", held ", MiB(stats_.reserved_bytes));
    return nullptr;
  }
  ++stats_.device_mallocs;
  stats_.reserved_bytes += size;
  auto* b = new Block;
  b->ptr = static_cast<char*>(*p);
  b->size = size;
  b->small = small;
  b->segment = b->ptr;
  segments_[b->ptr] = size;
  return b;
}

void CachingAllocator::ReleaseFreeSegments() {
  for (Pool* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      // A free block that spans its whole segment: nothing else lives there.
      if (b->prev == nullptr && b->next == nullptr) {
        segments_.erase(b->segment);
        stats_.reserved_bytes -= b->size;
        ++stats_.device_frees;
        memory_->Free(b->ptr);
        delete b;
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
  }
}

void CachingAllocator::Absorb(Block* left, Block* right) {
  left->size += right->size;
  left->next = right->next;
  if (right->next != nullptr) right->next->prev = left;
  delete right;
}

void* CachingAllocator::Allocate(size_t bytes) {
  const size_t size = RoundUp(std::max<size_t>(bytes, 1), kAlignment);
  const bool small = size <= kSmallMax;
  absl::MutexLock l(&mu_);
  Pool& pool = small ? small_free_ : large_free_;
  Block* b = TakeFree(pool, size);
  if (b == nullptr) {
    b = NewSegment(small ? kSmallSegment : RoundUp(size, kLargeRound), small);
    if (b == nullptr) return nullptr;
  }
  // Split off the remainder when it is worth keeping apart.
  const size_t rest = b->size - size;
  if (rest >= (small ? kAlignment : kLargeMinSplit)) {
    auto* r = new Block;
    r->ptr = b->ptr + size;
    r->size = rest;
    r->small = small;
    r->segment = b->segment;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool.insert(r);
  }
  b->free = false;
  live_[b->ptr] = b;
  stats_.in_use_bytes += b->size;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.in_use_bytes);
  ++stats_.allocations;
  return b->ptr;
}

void CachingAllocator::Deallocate(void* p, size_t /*bytes*/) {
  if (p == nullptr) return;
  absl::MutexLock l(&mu_);
  auto it = live_.find(static_cast<char*>(p));
  if (it == live_.end()) {
    spdlog::error(
        "caching allocator for {}: free of {} which it did not hand out (or "
        "freed twice); ignored",
        memory_->device().ToString(), p);
    return;
  }
  Block* b = it->second;
  live_.erase(it);
  stats_.in_use_bytes -= b->size;
  Pool& pool = b->small ? small_free_ : large_free_;
  b->free = true;
  // Merge with free neighbours; they leave the pool while their size changes.
  if (b->next != nullptr && b->next->free) {
    pool.erase(b->next);
    Absorb(b, b->next);
  }
  if (b->prev != nullptr && b->prev->free) {
    Block* q = b->prev;
    pool.erase(q);
    Absorb(q, b);
    b = q;
  }
  pool.insert(b);
}

Device CachingAllocator::device() const { return memory_->device(); }

size_t CachingAllocator::in_use_bytes() const {
  absl::MutexLock l(&mu_);
  return stats_.in_use_bytes;
}

size_t CachingAllocator::peak_bytes() const {
  absl::MutexLock l(&mu_);
  return stats_.peak_bytes;
}

CachingAllocatorStats CachingAllocator::stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

std::string CachingAllocator::last_error() const {
  absl::MutexLock l(&mu_);
  return last_error_;
}

void CachingAllocator::EmptyCache() {
  absl::MutexLock l(&mu_);
  ReleaseFreeSegments();
}

}  // namespace yoke::engine
