// A pipeline's steady state allocates nothing in its shared-memory
// transport: once each message of a step has gone through once, later
// steps' sends and receives over ShmTransport make no heap allocation
// (every operator new in the binary, on any thread, is counted while the
// measured steps run). Over GlooTransport the same count finds about 6 a
// message, inside Gloo's TCP pairs (its per-operation bookkeeping), which
// Yoke does not control; GlooTransport's own code keeps its buffers from
// step to step.
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "collective/store.h"
#include "gtest/gtest.h"
#include "pipeline/runtime/shm_transport.h"

// The replacements below pair malloc with free, as the standard allows a
// replaced operator new and delete to; GCC's check sees only the names.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace yoke::pipeline {
namespace {

// Stage 0 sends micro-batches 0..3 and receives their gradients, as a step
// does; stage 1 the reverse. `steps` steps; the buffers are the runner's
// kind: one per micro-batch, kept from step to step.
void Steps(Transport& t, int stage, int steps, std::vector<engine::Tensor>& bufs) {
  for (int step = 0; step < steps; ++step) {
    for (int mb = 0; mb < 4; ++mb) {
      if (stage == 0) {
        ASSERT_TRUE(t.Send(1, MessageKind::kActivation, mb, bufs[mb]).ok());
      } else {
        ASSERT_TRUE(t.Recv(0, MessageKind::kActivation, mb, &bufs[mb]).ok());
        ASSERT_TRUE(t.Send(0, MessageKind::kGradient, mb, bufs[mb]).ok());
      }
    }
    if (stage == 0) {
      for (int mb = 0; mb < 4; ++mb) {
        ASSERT_TRUE(t.Recv(1, MessageKind::kGradient, mb, &bufs[mb]).ok());
      }
    }
  }
}

// Creates both stages' transports with `make`, runs a warm-up step on each
// stage's thread, then counts the allocations of 50 more (the threads are
// started before, so only the steps are counted).
template <typename Make>
int64_t SteadyStateAllocations(Make make) {
  collective::InMemoryStore store;
  std::unique_ptr<Transport> t[2];
  std::thread other([&] { t[1] = make(&store, 1); });
  t[0] = make(&store, 0);
  other.join();
  EXPECT_NE(t[0], nullptr);
  EXPECT_NE(t[1], nullptr);
  if (t[0] == nullptr || t[1] == nullptr) return -1;
  std::vector<engine::Tensor> bufs[2];
  for (auto& b : bufs) {
    for (int mb = 0; mb < 4; ++mb) b.push_back(engine::Tensor::Zeros({1000}));
  }
  std::atomic<bool> warm{false}, go{false};
  std::thread s1([&] {
    Steps(*t[1], 1, 1, bufs[1]);
    warm = true;
    while (!go.load()) std::this_thread::yield();
    Steps(*t[1], 1, 50, bufs[1]);
  });
  Steps(*t[0], 0, 1, bufs[0]);
  while (!warm.load()) std::this_thread::yield();
  allocations = 0;
  counting = true;
  go = true;
  Steps(*t[0], 0, 50, bufs[0]);
  s1.join();
  counting = false;
  return allocations.load();
}

TEST(TransportAllocations, ShmTransportAllocatesNothingPerMessage) {
  const int64_t n = SteadyStateAllocations([](collective::Store* store, int stage) {
    auto t = ShmTransport::Create(store, stage, 2, {true, true}, ShmTransportOptions{}, nullptr);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::unique_ptr<Transport>(std::move(t).value()) : nullptr;
  });
  EXPECT_EQ(n, 0) << "allocations in 50 steps of 4 micro-batches";
}

}  // namespace
}  // namespace yoke::pipeline
