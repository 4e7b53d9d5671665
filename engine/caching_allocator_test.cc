// The caching allocator over a fake device (host memory that counts calls
// and can be made to run out), so the block logic is tested on any machine.
// engine/kernels/cuda/cuda_allocator_test.cc runs it over cudaMalloc.
#include "engine/caching_allocator.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

struct FakeCounters {
  int64_t mallocs = 0, frees = 0;
  size_t held = 0;
  size_t capacity = size_t{1} << 40;  // refuse beyond this many bytes held
};

class FakeDeviceMemory final : public DeviceMemory {
 public:
  explicit FakeDeviceMemory(FakeCounters* c) : c_(c) {}
  absl::StatusOr<void*> Malloc(size_t bytes) override {
    if (c_->held + bytes > c_->capacity) {
      return absl::ResourceExhaustedError(absl::StrCat("fake device: out of memory"));
    }
    void* p = std::aligned_alloc(4096, bytes);
    ++c_->mallocs;
    c_->held += bytes;
    sizes_[p] = bytes;
    return p;
  }
  void Free(void* p) override {
    ++c_->frees;
    c_->held -= sizes_.at(p);
    sizes_.erase(p);
    std::free(p);
  }
  Device device() const override { return Device::CUDA(0); }

 private:
  FakeCounters* c_;
  std::map<void*, size_t> sizes_;
};

std::unique_ptr<CachingAllocator> Make(FakeCounters* c) {
  return std::make_unique<CachingAllocator>(std::make_unique<FakeDeviceMemory>(c));
}

// A training step's allocations: a fixed sequence of sizes, freed in another
// order. After the first step, the device is never asked again.
TEST(CachingAllocatorTest, SteadyStateStepsMakeNoDeviceCalls) {
  FakeCounters c;
  auto a = Make(&c);
  const std::vector<size_t> sizes = {1 << 10, 3 << 20, 100, 12 << 20,  64 << 10,
                                     5000,    3 << 20, 7,   800 << 10, 25 << 20};
  int64_t after_first = 0;
  for (int step = 0; step < 5; ++step) {
    std::vector<void*> ptrs;
    for (size_t s : sizes) {
      void* p = a->Allocate(s);
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % CachingAllocator::kAlignment, 0u);
      std::memset(p, 0xab, s);  // the whole block is usable
      ptrs.push_back(p);
    }
    for (size_t i = 0; i < ptrs.size(); i += 2) a->Deallocate(ptrs[i], sizes[i]);
    for (size_t i = 1; i < ptrs.size(); i += 2) a->Deallocate(ptrs[i], sizes[i]);
    if (step == 0) after_first = c.mallocs;
  }
  EXPECT_GT(after_first, 0);
  EXPECT_EQ(c.mallocs, after_first) << "device allocations after the first step";
  const CachingAllocatorStats s = a->stats();
  EXPECT_EQ(s.device_mallocs, c.mallocs);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.allocations, 50);
  EXPECT_EQ(s.reserved_bytes, c.held);
  // Peak: one step's blocks at once, each rounded up to 512 bytes.
  size_t want_peak = 0;
  for (size_t s2 : sizes) want_peak += (s2 + 511) / 512 * 512;
  EXPECT_EQ(s.peak_bytes, want_peak);
}

TEST(CachingAllocatorTest, SmallBlocksShareASegmentAndCoalesceWhenFreed) {
  FakeCounters c;
  auto a = Make(&c);
  void* x = a->Allocate(1000);  // 1024
  void* y = a->Allocate(512);
  void* z = a->Allocate(1);  // 512
  EXPECT_EQ(c.mallocs, 1);   // one 2 MiB segment holds all three
  EXPECT_EQ(static_cast<char*>(y) - static_cast<char*>(x), 1024);
  EXPECT_EQ(static_cast<char*>(z) - static_cast<char*>(y), 512);
  EXPECT_EQ(a->in_use_bytes(), 2048u);
  // Free the middle, then the neighbours: all merge back into the segment,
  // so the whole segment can be handed out again without the device.
  a->Deallocate(y, 512);
  a->Deallocate(x, 1000);
  a->Deallocate(z, 1);
  void* whole = a->Allocate(CachingAllocator::kSmallMax);
  EXPECT_EQ(whole, x);
  EXPECT_EQ(c.mallocs, 1);
  a->Deallocate(whole, CachingAllocator::kSmallMax);
  a->EmptyCache();
  EXPECT_EQ(c.frees, 1);
  EXPECT_EQ(c.held, 0u);
  EXPECT_EQ(a->stats().reserved_bytes, 0u);
}

TEST(CachingAllocatorTest, BestFitAndPoolsDoNotMix) {
  FakeCounters c;
  auto a = Make(&c);
  void* big = a->Allocate(6 << 20);    // large pool: a 6 MiB segment
  void* small = a->Allocate(4 << 10);  // small pool: its own 2 MiB segment
  EXPECT_EQ(c.mallocs, 2);
  a->Deallocate(big, 6 << 20);
  // A small request never takes the free large block.
  void* small2 = a->Allocate(8 << 10);
  EXPECT_EQ(c.mallocs, 2);
  EXPECT_NE(small2, big);
  // A large request reuses the large block, and its 1+ MiB rest is split off
  // for the next large request.
  void* l1 = a->Allocate(3 << 20);
  void* l2 = a->Allocate(2 << 20);
  EXPECT_EQ(l1, big);
  EXPECT_EQ(static_cast<char*>(l2) - static_cast<char*>(l1), 3 << 20);
  EXPECT_EQ(c.mallocs, 2);
  for (void* p : {small, small2, l1, l2}) a->Deallocate(p, 0);
  EXPECT_EQ(a->in_use_bytes(), 0u);
}

TEST(CachingAllocatorTest, OutOfMemoryReleasesTheCacheRetriesThenFailsClearly) {
  FakeCounters c;
  c.capacity = 8 << 20;
  auto a = Make(&c);
  void* p = a->Allocate(4 << 20);
  ASSERT_NE(p, nullptr);
  a->Deallocate(p, 4 << 20);  // cached: the device still holds 4 MiB
  // 6 MiB does not fit beside the cached 4 MiB: the cache is released, then
  // the retry succeeds.
  void* q = a->Allocate(6 << 20);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(c.frees, 1);
  EXPECT_EQ(a->last_error(), "");
  // 4 MiB more cannot fit while q is in use: null, with a reason.
  EXPECT_EQ(a->Allocate(4 << 20), nullptr);
  const std::string why = a->last_error();
  EXPECT_NE(why.find("out of memory on cuda:0"), std::string::npos) << why;
  EXPECT_NE(why.find("4 MiB"), std::string::npos) << why;
  EXPECT_NE(why.find("in use 6 MiB"), std::string::npos) << why;
  a->Deallocate(q, 6 << 20);
}

TEST(CachingAllocatorTest, UnknownAndDoubleFreesAreIgnored) {
  FakeCounters c;
  auto a = Make(&c);
  void* p = a->Allocate(100);
  int local = 0;
  a->Deallocate(&local, 4);  // never handed out
  EXPECT_EQ(a->in_use_bytes(), 512u);
  a->Deallocate(p, 100);
  a->Deallocate(p, 100);  // twice
  EXPECT_EQ(a->in_use_bytes(), 0u);
  // The block is handed out once, not twice.
  void* x = a->Allocate(100);
  void* y = a->Allocate(100);
  EXPECT_NE(x, y);
}

// Replicas of one device share its allocator: blocks handed to concurrent
// threads never overlap, and everything adds up afterwards.
TEST(CachingAllocatorTest, ConcurrentThreadsGetDisjointBlocks) {
  FakeCounters c;
  auto a = Make(&c);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<unsigned char*, size_t>> held;
      for (int i = 0; i < 2000; ++i) {
        if (held.size() < 8 && (rng() % 3 != 0 || held.empty())) {
          const size_t s = rng() % 2 == 0 ? 1 + rng() % 5000 : 1 + rng() % (3 << 20);
          auto* p = static_cast<unsigned char*>(a->Allocate(s));
          if (p == nullptr) {
            ++bad[t];
            continue;
          }
          std::memset(p, t + 1, s);
          held.emplace_back(p, s);
        } else {
          const size_t k = rng() % held.size();
          auto [p, s] = held[k];
          for (size_t j = 0; j < s; j += 97) bad[t] += p[j] != t + 1;  // nobody wrote here
          a->Deallocate(p, s);
          held.erase(held.begin() + k);
        }
      }
      for (auto [p, s] : held) a->Deallocate(p, s);
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  EXPECT_EQ(a->in_use_bytes(), 0u);
  EXPECT_EQ(a->stats().allocations > 0, true);
  a->EmptyCache();
  EXPECT_EQ(c.held, 0u) << "every segment merged back and was returned";
}

}  // namespace
}  // namespace yoke::engine
