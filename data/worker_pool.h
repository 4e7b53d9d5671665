// WorkerPool: a fixed set of threads that run one parallel loop at a time.
//
// Run(n, fn) calls fn(worker, i) once for every i in [0, n), spread over the
// pool's threads and the calling thread (worker 0), and returns when all
// calls have returned. `worker` lies in [0, threads()), so callers can give
// each worker its own scratch memory. The pipeline decodes a batch of image
// files with it.
//
// Thread-safety: Run() is called by one thread at a time (the owner); the
// destructor joins the threads.
#ifndef YOKE_DATA_WORKER_POOL_H_
#define YOKE_DATA_WORKER_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace yoke::data {

class WorkerPool {
 public:
  // `threads` >= 1 counts the caller: threads - 1 threads are started.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }
  void Run(int64_t n, const std::function<void(int, int64_t)>& fn);

 private:
  void Loop(int worker);
  void Work(int worker);

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;  // bumped by every Run
  int pending_ = 0;          // helpers still in the current Run
  bool stop_ = false;
  const std::function<void(int, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::vector<std::thread> helpers_;
};

}  // namespace yoke::data

#endif  // YOKE_DATA_WORKER_POOL_H_
