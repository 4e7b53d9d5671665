#include "data/worker_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace yoke::data {
namespace {

// Every index runs exactly once per Run, on a worker in [0, threads), and
// Run returns only after all of them: round after round, for any n.
TEST(WorkerPoolTest, RunsEachIndexOncePerRound) {
  for (int threads : {1, 2, 5}) {
    WorkerPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (int64_t n : {0, 1, 3, 100, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (auto& h : hits) h.store(0);
      std::atomic<bool> bad_worker{false};
      pool.Run(n, [&](int w, int64_t i) {
        if (w < 0 || w >= threads) bad_worker = true;
        hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
      EXPECT_FALSE(bad_worker.load());
    }
  }
}

}  // namespace
}  // namespace yoke::data
