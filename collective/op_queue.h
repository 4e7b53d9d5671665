// OpQueue: the in-order op queue a Communicator backend runs its ops on
// (communicator.h's execution contract), without the transport. The Gloo
// communicator (gloo_communicator.cc) and the shared-memory one
// (shm_communicator.cc) each supply only what an op does (Run) and what a
// break means for their transport (OnBreak).
//
// Issue order: each Issue() gets the next sequence number (1, 2, ...),
// remembers the op's signature for hang checks (State()), and queues the op;
// one worker thread runs the ops one at a time in issue order. An op whose
// Run fails breaks the queue with its status. The queue is broken by the
// first failure, timeout, Abort() or Leave(), and stays broken (the first
// status wins): queued and later ops fail with that status without running,
// and every Wait() on an unfinished op returns it at once (Abort() from any
// thread wakes every waiter with ABORTED). A failed op's own Wait() keeps
// its own status (its diagnosis), which is also what breaks the queue.
//
// Leave(): an op outside the sequence (seq 0; issued_seq unchanged, no hang
// check entry, no watchdog) queued behind every op issued so far. Once it has
// run the queue is broken: with FAILED_PRECONDITION ("rank 1 of 2 has left
// the communicator") when it succeeded, else with its failure.
//
// Timeouts: Issue() refuses a timeout <= 0 (INVALID_ARGUMENT, naming the op).
// A transport whose Run honours the op's timeout itself (shm) needs nothing
// more; one that cannot interrupt its transport (Gloo) starts the watchdog
// (StartWatchdog), which fails the running op once it is older than its
// timeout, with the status its `on_overdue` returns (the hang check).
//
// Breaks: OnBreak(status, cause) is called after every Break, the first or
// not, outside the queue's lock and after the waiters are woken, with the
// status of that Break (not necessarily the one that won). It is where a
// transport stops its own waits (shm marks its segment broken and aborts its
// inner Gloo communicators; NCCL would abort its ncclComm).
//
// Shutdown: Stop(wait) lets the worker finish the queue (ops fail fast once
// the queue is broken, so break it first) and joins it; when it has not
// exited within `wait` (a transport stuck in an op it cannot cancel) it is
// detached and keeps the queue alive until that op returns. After a Stop()
// that joined, OnBreak is never called again.
//
// Why not NCCL yet: nccl_communicator.cc issues ops on a CUDA stream from the
// caller's thread. On this queue its Run would issue the op and poll its
// event until it fires, its OnBreak would abort the ncclComm (which ends the
// running kernels, so Run returns), and its watchdog's on_overdue would run
// the hang check, as Gloo's does.
//
// Thread-safety: Issue() and Leave() from the communicator's thread; Wait()
// and IsDone() from any thread holding the Work; Abort(), Break(), State(),
// issued() and completed() from any thread.
#ifndef YOKE_COLLECTIVE_OP_QUEUE_H_
#define YOKE_COLLECTIVE_OP_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "collective/communicator.h"
#include "collective/hang_check.h"

namespace yoke::collective {

class OpQueue : public std::enable_shared_from_this<OpQueue> {
 public:
  struct Op;
  // What an op does, on the worker thread: OK, or why it failed. `op` gives
  // its seq, what, signature and timeout.
  using Run = std::function<absl::Status(const Op& op)>;

  // One queued op. The queue sets every field; `done` and `status` are
  // guarded by its lock.
  struct Op {
    int64_t seq = 0;        // 0 for Leave()'s
    std::string what;       // "allreduce #7 (bucket 3)", or "leave"
    std::string signature;  // "allreduce 1000 f32 sum": must match on every rank
    absl::Duration timeout;
    bool leave = false;
    Run run;  // cleared by the worker once it has run (or been skipped)
    bool done = false;
    absl::Status status;
    absl::Time started = absl::InfiniteFuture();  // when the worker began it
  };

  // Why the queue was broken (OnBreak's second argument).
  enum class BreakCause {
    kAbort,     // Abort()
    kShutdown,  // the owner is going away
    kOpFailed,  // an op's Run failed
    kLeave,     // Leave()'s op ran (it succeeded, or not)
    kTimeout,   // the watchdog found the running op overdue
    kPeer,      // a peer's failure (the hang listener)
  };
  using OnBreak = std::function<void(const absl::Status& status, BreakCause cause)>;

  // A queue for rank `rank` of `size` (they only name the rank in messages),
  // with its worker thread started. `on_break` may be empty.
  static std::shared_ptr<OpQueue> Create(int rank, int size, OnBreak on_break = nullptr);
  // Joins the watchdog if it still runs. Stop() must have been called
  // (until then the worker thread keeps the queue alive).
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The last op issued, and the last one that completed successfully.
  int64_t issued() const { return issued_.load(); }
  int64_t completed() const { return completed_.load(); }

  // Queues op `name` ("allreduce") with `signature` and `run`, and returns
  // its Work; a FailedWork (INVALID_ARGUMENT) for o.timeout <= 0. Queued even
  // when the queue is broken: the Work then fails with the break's status.
  std::unique_ptr<Work> Issue(const char* name, const Options& o, std::string signature, Run run);

  // Runs `run` as Leave()'s op (above) and waits for it: its status, or the
  // break's when the queue broke first. INVALID_ARGUMENT for timeout <= 0
  // (the op's timeout, which `run` must honour).
  absl::Status Leave(absl::Duration timeout, Run run);

  // Blocks until `op` is done (its status) or the queue is broken (the
  // break's status).
  absl::Status Wait(const Op& op);
  // Non-blocking: true once Wait() would return at once.
  bool IsDone(const Op& op);

  // Breaks the queue with `s` (unless it already is: the first status
  // stays), wakes every waiter, then calls OnBreak(s, cause).
  void Break(const absl::Status& s, BreakCause cause);
  // Break(ABORTED `reason`, kAbort).
  void Abort(absl::string_view reason);
  // OK while usable, else the status that broke it.
  absl::Status broken();

  // "allreduce #7 (bucket 3) on rank 0 of 2".
  std::string Where(const Op& op) const;

  // For a hang listener: this rank's sequence numbers and the signature of
  // its op #seq (empty when unknown, or too old: the last 64 are kept).
  SeqState State(int64_t seq);

  // Starts the watchdog thread: every `interval`, if the running op (not
  // Leave()'s) is older than its timeout and the queue is not broken, breaks
  // the queue (kTimeout) with on_overdue(op), which runs on the watchdog
  // thread and may take a while (the hang check). At most once per queue.
  void StartWatchdog(std::function<absl::Status(const Op&)> on_overdue,
                     absl::Duration interval = absl::Milliseconds(50));
  // Stops and joins the watchdog (a no-op without one).
  void StopWatchdog();

  // Stops the worker once the queue is drained and joins it: true if it
  // exited within `wait` (absl::InfiniteDuration() waits for ever); false
  // if it was detached instead. Call once.
  bool Stop(absl::Duration wait);

 private:
  OpQueue(int rank, int size, OnBreak on_break);
  void Loop();
  void Watch();
  void SetBroken(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(Op* op, const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  static constexpr int kRecentOps = 64;

  const int rank_;
  const int size_;
  std::atomic<int64_t> issued_{0};
  std::atomic<int64_t> completed_{0};
  absl::Notification exited_;  // the worker left its loop
  std::thread thread_;

  std::function<absl::Status(const Op&)> on_overdue_;  // watchdog thread only
  absl::Duration watch_interval_;
  absl::Notification stop_watchdog_;
  std::thread watchdog_;

  absl::Mutex mu_;
  absl::CondVar work_cv_;  // the worker waits for ops or stop_
  absl::CondVar done_cv_;  // Wait() waits for an op to finish or a break
  OnBreak on_break_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<Op>> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);  // OK while usable
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<Op> running_ ABSL_GUARDED_BY(mu_);
  std::pair<int64_t, std::string> recent_[kRecentOps] ABSL_GUARDED_BY(mu_);
};

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_OP_QUEUE_H_
