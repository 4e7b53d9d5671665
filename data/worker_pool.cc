#include "data/worker_pool.h"

namespace yoke::data {

WorkerPool::WorkerPool(int threads) {
  for (int w = 1; w < threads; ++w) helpers_.emplace_back([this, w] { Loop(w); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void WorkerPool::Work(int worker) {
  for (int64_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) (*fn_)(worker, i);
}

void WorkerPool::Loop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Work(worker);
    std::lock_guard<std::mutex> l(mu_);
    if (--pending_ == 0) cv_.notify_all();
  }
}

void WorkerPool::Run(int64_t n, const std::function<void(int, int64_t)>& fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    pending_ = static_cast<int>(helpers_.size());
    ++generation_;
  }
  cv_.notify_all();
  Work(0);
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return pending_ == 0; });
}

}  // namespace yoke::data
