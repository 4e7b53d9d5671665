#include "collective/op_queue.h"

#include "absl/strings/str_cat.h"

namespace yoke::collective {
namespace {

// The Work of an op on an OpQueue.
class QueuedWork final : public Work {
 public:
  QueuedWork(std::shared_ptr<OpQueue> queue, std::shared_ptr<OpQueue::Op> op)
      : queue_(std::move(queue)), op_(std::move(op)) {}
  absl::Status Wait() override { return queue_->Wait(*op_); }
  bool IsCompleted() override { return queue_->IsDone(*op_); }
  int64_t seq() const override { return op_->seq; }

 private:
  std::shared_ptr<OpQueue> queue_;
  std::shared_ptr<OpQueue::Op> op_;
};

}  // namespace

OpQueue::OpQueue(int rank, int size, OnBreak on_break)
    : rank_(rank), size_(size), on_break_(std::move(on_break)) {}

std::shared_ptr<OpQueue> OpQueue::Create(int rank, int size, OnBreak on_break) {
  std::shared_ptr<OpQueue> q(new OpQueue(rank, size, std::move(on_break)));
  // The worker owns a reference: a detached worker (Stop) keeps the queue.
  q->thread_ = std::thread([q] { q->Loop(); });
  return q;
}

OpQueue::~OpQueue() {
  StopWatchdog();
  // Only a detached worker (which then owns the last reference) or a queue
  // never stopped can get here with the thread joinable; never join oneself.
  if (thread_.joinable()) thread_.detach();
}

std::unique_ptr<Work> OpQueue::Issue(const char* name, const Options& o, std::string signature,
                                     Run run) {
  if (o.timeout <= absl::ZeroDuration()) {
    return std::make_unique<FailedWork>(absl::InvalidArgumentError(
        absl::StrCat(name, ": timeout: must be > 0, got ", absl::FormatDuration(o.timeout))));
  }
  auto op = std::make_shared<Op>();
  op->seq = issued_.load() + 1;
  op->signature = std::move(signature);
  op->what =
      absl::StrCat(name, " #", op->seq, o.tag.empty() ? "" : " (", o.tag, o.tag.empty() ? "" : ")");
  op->timeout = o.timeout;
  op->run = std::move(run);
  {
    absl::MutexLock lock(&mu_);
    recent_[op->seq % kRecentOps] = {op->seq, op->signature};
    queue_.push_back(op);
    work_cv_.Signal();
    issued_.store(op->seq);
  }
  return std::make_unique<QueuedWork>(shared_from_this(), std::move(op));
}

absl::Status OpQueue::Leave(absl::Duration timeout, Run run) {
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("leave: timeout: must be > 0, got ", absl::FormatDuration(timeout)));
  }
  auto op = std::make_shared<Op>();
  op->what = "leave";
  op->timeout = timeout;
  op->leave = true;
  op->run = std::move(run);
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(op);
    work_cv_.Signal();
  }
  return Wait(*op);
}

absl::Status OpQueue::Wait(const Op& op) {
  // A CondVar, not Mutex::Await: absl's conditional waits woke a jiffy
  // (4 ms) late here, which dominated small ops.
  absl::MutexLock lock(&mu_);
  while (!op.done && broken_.ok()) done_cv_.Wait(&mu_);
  return op.done ? op.status : broken_;
}

bool OpQueue::IsDone(const Op& op) {
  absl::MutexLock lock(&mu_);
  return op.done || !broken_.ok();
}

void OpQueue::SetBroken(const absl::Status& s) {
  if (broken_.ok()) broken_ = s;
  done_cv_.SignalAll();
}

void OpQueue::Finish(Op* op, const absl::Status& s) {
  op->status = s;
  op->done = true;
  done_cv_.SignalAll();
}

void OpQueue::Break(const absl::Status& s, BreakCause cause) {
  OnBreak on_break;
  {
    absl::MutexLock lock(&mu_);
    SetBroken(s);
    on_break = on_break_;
  }
  if (on_break) on_break(s, cause);
}

void OpQueue::Abort(absl::string_view reason) {
  Break(absl::AbortedError(reason), BreakCause::kAbort);
}

absl::Status OpQueue::broken() {
  absl::MutexLock lock(&mu_);
  return broken_;
}

std::string OpQueue::Where(const Op& op) const {
  return absl::StrCat(op.what, " on rank ", rank_, " of ", size_);
}

SeqState OpQueue::State(int64_t seq) {
  absl::MutexLock lock(&mu_);
  const auto& [s, signature] = recent_[seq % kRecentOps];
  return SeqState{issued_.load(), completed_.load(), s == seq ? signature : ""};
}

void OpQueue::Loop() {
  while (true) {
    std::shared_ptr<Op> op;
    Run run;  // destroyed outside the lock: it may own transport state
    {
      absl::MutexLock lock(&mu_);
      while (!stop_ && queue_.empty()) work_cv_.Wait(&mu_);
      if (queue_.empty()) break;
      op = std::move(queue_.front());
      queue_.pop_front();
      run = std::move(op->run);
      op->run = nullptr;
      if (!broken_.ok()) {
        Finish(op.get(), broken_);
        continue;
      }
      op->started = absl::Now();
      running_ = op;
    }
    const absl::Status s = run(*op);
    run = nullptr;
    absl::Status broke;
    const BreakCause cause = op->leave ? BreakCause::kLeave : BreakCause::kOpFailed;
    OnBreak on_break;
    {
      absl::MutexLock lock(&mu_);
      running_ = nullptr;
      if (op->leave) {
        // Later ops fail at once: the peers are gone or going.
        broke = s.ok() ? absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " of ", size_,
                                                                    " has left the communicator"))
                       : s;
      } else if (s.ok()) {
        completed_.store(op->seq);
      } else {
        broke = s;
      }
      // Finished and broken at once: the op's waiter gets its own status (a
      // failed op keeps its diagnosis), every other waiter the break's.
      if (!broke.ok()) SetBroken(broke);
      Finish(op.get(), s);
      on_break = on_break_;
    }
    if (!broke.ok() && on_break) on_break(broke, cause);
  }
  exited_.Notify();
}

void OpQueue::StartWatchdog(std::function<absl::Status(const Op&)> on_overdue,
                            absl::Duration interval) {
  on_overdue_ = std::move(on_overdue);
  watch_interval_ = interval;
  watchdog_ = std::thread([this] { Watch(); });
}

void OpQueue::StopWatchdog() {
  if (!watchdog_.joinable()) return;
  stop_watchdog_.Notify();
  watchdog_.join();
}

void OpQueue::Watch() {
  while (!stop_watchdog_.WaitForNotificationWithTimeout(watch_interval_)) {
    std::shared_ptr<Op> op;
    {
      absl::MutexLock lock(&mu_);
      if (running_ == nullptr || running_->leave || !broken_.ok() ||
          absl::Now() - running_->started < running_->timeout) {
        continue;
      }
      op = running_;
    }
    Break(on_overdue_(*op), BreakCause::kTimeout);
  }
}

bool OpQueue::Stop(absl::Duration wait) {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    work_cv_.Signal();
  }
  if (wait != absl::InfiniteDuration() && !exited_.WaitForNotificationWithTimeout(wait)) {
    thread_.detach();
    return false;
  }
  thread_.join();
  absl::MutexLock lock(&mu_);
  on_break_ = nullptr;
  return true;
}

}  // namespace yoke::collective
