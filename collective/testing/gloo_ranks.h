// Test helpers: N Gloo ranks as threads of this process, on one store.
// Header-only, for collective/*_test.cc.
#ifndef YOKE_COLLECTIVE_TESTING_GLOO_RANKS_H_
#define YOKE_COLLECTIVE_TESTING_GLOO_RANKS_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "collective/gloo_communicator.h"
#include "gtest/gtest.h"

namespace yoke::collective::testing {

// Creates `n` communicators (one per thread, as bootstrap needs) on `store`.
inline std::vector<std::unique_ptr<Communicator>> ConnectGloo(int n, Store* store,
                                                              const GlooOptions& o = {}) {
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto c = CreateGlooCommunicator(store, r, n, o);
      ASSERT_TRUE(c.ok()) << c.status();
      comms[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Runs fn(rank, comm) on one thread per rank and joins them.
inline void OnEveryRank(std::vector<std::unique_ptr<Communicator>>& comms,
                        const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < static_cast<int>(comms.size()); ++r) {
    threads.emplace_back([&, r] { fn(r, *comms[r]); });
  }
  for (auto& t : threads) t.join();
}

}  // namespace yoke::collective::testing

#endif  // YOKE_COLLECTIVE_TESTING_GLOO_RANKS_H_
