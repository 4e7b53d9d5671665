// The op queue on its own, with runs that stand in for a transport: issue
// order, breaks (a failed op, Abort, the watchdog), Leave() and shutdown.
#include "collective/op_queue.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using BreakCause = OpQueue::BreakCause;

// Records what the runs and OnBreak saw. (OnBreak after a failed op or a
// leave runs on the worker once the op's waiter is woken: look after Stop.)
struct Log {
  absl::Mutex mu;
  std::vector<int64_t> ran;  // seqs, in run order (0 for Leave's)
  std::vector<std::pair<absl::Status, BreakCause>> breaks;

  OpQueue::Run Ok() {
    return [this](const OpQueue::Op& op) {
      absl::MutexLock l(&mu);
      ran.push_back(op.seq);
      return absl::OkStatus();
    };
  }
  OpQueue::OnBreak Hook() {
    return [this](const absl::Status& s, BreakCause c) {
      absl::MutexLock l(&mu);
      breaks.emplace_back(s, c);
    };
  }
  std::vector<int64_t> Ran() {
    absl::MutexLock l(&mu);
    return ran;
  }
  // Every OnBreak call's cause, in order.
  std::vector<BreakCause> Causes() {
    absl::MutexLock l(&mu);
    std::vector<BreakCause> causes;
    for (const auto& b : breaks) causes.push_back(b.second);
    return causes;
  }
};

// A run that blocks until `release`, then records itself.
OpQueue::Run Blocking(Log* log, absl::Notification* started, absl::Notification* release) {
  return [=](const OpQueue::Op& op) {
    started->Notify();
    release->WaitForNotification();
    return log->Ok()(op);
  };
}

TEST(OpQueueTest, OpsRunOneAtATimeInIssueOrder) {
  Log log;
  auto q = OpQueue::Create(0, 2);
  absl::Notification started, release;
  std::vector<std::unique_ptr<Work>> works;
  works.push_back(q->Issue("barrier", {}, "barrier", Blocking(&log, &started, &release)));
  for (int i = 0; i < 9; ++i) works.push_back(q->Issue("barrier", {}, "barrier", log.Ok()));
  started.WaitForNotification();
  // The first op holds the worker: nothing behind it has run.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(log.Ran().empty());
  EXPECT_FALSE(works[9]->IsCompleted());
  EXPECT_EQ(q->issued(), 10);
  EXPECT_EQ(q->completed(), 0);
  release.Notify();
  for (size_t i = 0; i < works.size(); ++i) {
    EXPECT_EQ(works[i]->seq(), static_cast<int64_t>(i) + 1);
    EXPECT_TRUE(works[i]->Wait().ok());
  }
  EXPECT_THAT(log.Ran(), ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  EXPECT_EQ(q->completed(), 10);
  EXPECT_TRUE(q->Stop(absl::InfiniteDuration()));
}

TEST(OpQueueTest, AFailedOpKeepsItsStatusAndFailsEveryLaterOpWithoutRunningIt) {
  Log log;
  auto q = OpQueue::Create(1, 3, log.Hook());
  auto w1 = q->Issue("allreduce", {}, "allreduce 4 f32 sum", log.Ok());
  Options tagged;
  tagged.tag = "bucket 3";
  auto w2 = q->Issue("allreduce", tagged, "allreduce 8 f32 sum", [&](const OpQueue::Op& op) {
    return absl::UnavailableError(q->Where(op) + " failed");
  });
  auto w3 = q->Issue("barrier", {}, "barrier", log.Ok());
  const absl::Status s2 = w2->Wait();
  EXPECT_EQ(s2, absl::UnavailableError("allreduce #2 (bucket 3) on rank 1 of 3 failed"));
  EXPECT_TRUE(w1->Wait().ok());
  EXPECT_EQ(w3->Wait(), s2);
  EXPECT_EQ(q->Issue("barrier", {}, "barrier", log.Ok())->Wait(), s2);
  EXPECT_THAT(log.Ran(), ElementsAre(1));
  EXPECT_EQ(q->completed(), 1);
  EXPECT_EQ(q->issued(), 4);
  EXPECT_EQ(q->broken(), s2);
  // The hang check can still name op #2.
  EXPECT_EQ(q->State(2).signature, "allreduce 8 f32 sum");
  EXPECT_EQ(q->State(2).issued, 4);
  EXPECT_EQ(q->State(2).completed, 1);
  EXPECT_TRUE(q->Stop(absl::InfiniteDuration()));
  EXPECT_THAT(log.Causes(), ElementsAre(BreakCause::kOpFailed));
  absl::MutexLock l(&log.mu);
  EXPECT_EQ(log.breaks.front().first, s2);
}

TEST(OpQueueTest, AbortWakesEveryWaiterAtOnceWhileTheOpStillRuns) {
  Log log;
  auto q = OpQueue::Create(0, 2, log.Hook());
  absl::Notification started, release;
  auto w1 = q->Issue("allreduce", {}, "", Blocking(&log, &started, &release));
  auto w2 = q->Issue("barrier", {}, "", log.Ok());
  started.WaitForNotification();
  std::vector<absl::Status> got(4);
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&, i] { got[i] = (i % 2 == 0 ? w1 : w2)->Wait(); });
  }
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(w1->IsCompleted());
  q->Abort("job cancelled");
  q->Abort("second abort");
  for (auto& t : waiters) t.join();  // would hang if Abort woke no one
  for (const absl::Status& s : got) EXPECT_EQ(s, absl::AbortedError("job cancelled"));
  EXPECT_TRUE(w1->IsCompleted());
  EXPECT_TRUE(log.Ran().empty());  // op 1 is still inside its run
  // OnBreak saw every Abort (in the aborting thread), with its own status;
  // the first one stays.
  EXPECT_THAT(log.Causes(), ElementsAre(BreakCause::kAbort, BreakCause::kAbort));
  {
    absl::MutexLock l(&log.mu);
    EXPECT_EQ(log.breaks.back().first, absl::AbortedError("second abort"));
  }
  release.Notify();
  EXPECT_TRUE(q->Stop(absl::InfiniteDuration()));
  // Op 1 finished after the abort, and its own (OK) status is what it
  // records; op 2 never ran.
  EXPECT_THAT(log.Ran(), ElementsAre(1));
  EXPECT_TRUE(w1->Wait().ok());
  EXPECT_EQ(w2->Wait(), absl::AbortedError("job cancelled"));
}

TEST(OpQueueTest, LeaveRunsAfterEveryOpIssuedOutsideTheSequenceAndEndsTheQueue) {
  Log log;
  auto q = OpQueue::Create(1, 2, log.Hook());
  absl::Notification started, release;
  auto w1 = q->Issue("allreduce", {}, "", Blocking(&log, &started, &release));
  auto w2 = q->Issue("barrier", {}, "", log.Ok());
  started.WaitForNotification();
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(50));
    release.Notify();
  });
  OpQueue::Op seen;
  const absl::Status left = q->Leave(absl::Seconds(7), [&](const OpQueue::Op& op) {
    seen.seq = op.seq;
    seen.what = op.what;
    seen.timeout = op.timeout;
    return log.Ok()(op);
  });
  releaser.join();
  EXPECT_TRUE(left.ok()) << left;
  EXPECT_THAT(log.Ran(), ElementsAre(1, 2, 0));
  EXPECT_EQ(seen.seq, 0);
  EXPECT_EQ(seen.what, "leave");
  EXPECT_EQ(seen.timeout, absl::Seconds(7));
  EXPECT_EQ(q->issued(), 2);
  EXPECT_EQ(q->completed(), 2);
  const absl::Status after = q->Issue("barrier", {}, "", log.Ok())->Wait();
  EXPECT_EQ(after, absl::FailedPreconditionError("rank 1 of 2 has left the communicator"));
  EXPECT_THAT(log.Ran(), ElementsAre(1, 2, 0));
  EXPECT_TRUE(q->Stop(absl::InfiniteDuration()));
  EXPECT_THAT(log.Causes(), ElementsAre(BreakCause::kLeave));
}

TEST(OpQueueTest, AFailedLeaveBreaksTheQueueWithItsOwnStatus) {
  Log log;
  auto q = OpQueue::Create(0, 2, log.Hook());
  const absl::Status why = absl::UnavailableError("not every peer left");
  EXPECT_EQ(q->Leave(absl::Seconds(1), [&](const OpQueue::Op&) { return why; }), why);
  EXPECT_EQ(q->broken(), why);
  EXPECT_EQ(q->Leave(absl::ZeroDuration(), log.Ok()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(q->Stop(absl::InfiniteDuration()));
}

TEST(OpQueueTest, BadTimeoutsFailBeforeTheOpIsIssued) {
  Log log;
  auto q = OpQueue::Create(0, 2);
  Options o;
  o.timeout = absl::ZeroDuration();
  auto w = q->Issue("broadcast", o, "", log.Ok());
  EXPECT_EQ(w->Wait(), absl::InvalidArgumentError("broadcast: timeout: must be > 0, got 0"));
  EXPECT_EQ(w->seq(), 0);
  EXPECT_EQ(q->issued(), 0);
  EXPECT_EQ(q->Leave(absl::Seconds(-1), log.Ok()),
            absl::InvalidArgumentError("leave: timeout: must be > 0, got -1s"));
  EXPECT_TRUE(q->broken().ok());
  EXPECT_TRUE(q->Issue("barrier", {}, "", log.Ok())->Wait().ok());
  EXPECT_TRUE(q->Stop(absl::InfiniteDuration()));
}

TEST(OpQueueTest, WatchdogFailsAnOverdueOpButNeverLeave) {
  Log log;
  auto q = OpQueue::Create(0, 2, log.Hook());
  std::atomic<int> checks{0};
  q->StartWatchdog(
      [&](const OpQueue::Op& op) {
        ++checks;
        return absl::DeadlineExceededError(q->Where(op) + " timed out");
      },
      absl::Milliseconds(5));
  // Leave's op outlives its timeout: not the watchdog's business.
  EXPECT_TRUE(q->Leave(absl::Milliseconds(10), [&](const OpQueue::Op&) {
                 absl::SleepFor(absl::Milliseconds(100));
                 return absl::OkStatus();
               }).ok());
  EXPECT_EQ(checks.load(), 0);
  q->StopWatchdog();

  Log log2;
  auto q2 = OpQueue::Create(0, 2, log2.Hook());
  q2->StartWatchdog(
      [&](const OpQueue::Op& op) {
        ++checks;
        return absl::DeadlineExceededError(q2->Where(op) + " timed out");
      },
      absl::Milliseconds(5));
  absl::Notification started, release;
  Options o;
  o.timeout = absl::Milliseconds(50);
  o.tag = "bucket 1";
  auto w = q2->Issue("allreduce", o, "", Blocking(&log2, &started, &release));
  const absl::Time start = absl::Now();
  const absl::Status s = w->Wait();  // the run never returns by itself
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(40));
  EXPECT_EQ(s, absl::DeadlineExceededError("allreduce #1 (bucket 1) on rank 0 of 2 timed out"));
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(checks.load(), 1);  // broken: not checked again
  q2->StopWatchdog();
  release.Notify();
  EXPECT_TRUE(q->Stop(absl::InfiniteDuration()));
  EXPECT_TRUE(q2->Stop(absl::InfiniteDuration()));
  EXPECT_THAT(log2.Causes(), ElementsAre(BreakCause::kTimeout));
}

TEST(OpQueueTest, StopDetachesAStuckWorkerThatKeepsTheQueueUntilItsOpReturns) {
  Log log;
  auto q = OpQueue::Create(0, 2, log.Hook());
  absl::Notification started, release, returned;
  auto w = q->Issue("allreduce", {}, "", [&](const OpQueue::Op&) {
    started.Notify();
    release.WaitForNotification();
    returned.Notify();
    return absl::OkStatus();
  });
  auto queued = q->Issue("barrier", {}, "", log.Ok());
  started.WaitForNotification();
  q->Break(absl::AbortedError("communicator destroyed"), BreakCause::kShutdown);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(q->Stop(absl::Milliseconds(50)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  std::weak_ptr<OpQueue> weak = q;
  q.reset();
  EXPECT_FALSE(weak.expired()) << "the detached worker owns the queue";
  release.Notify();
  returned.WaitForNotification();
  // The worker drains the queue (the barrier fails fast) and lets go.
  EXPECT_EQ(queued->Wait(), absl::AbortedError("communicator destroyed"));
  EXPECT_TRUE(log.Ran().empty());
  w.reset();
  queued.reset();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!weak.expired() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(weak.expired()) << "the worker exited and let go of the queue";
}

TEST(OpQueueTest, NoOnBreakAfterAStopThatJoined) {
  Log log;
  auto q = OpQueue::Create(0, 1, log.Hook());
  EXPECT_TRUE(q->Issue("barrier", {}, "", log.Ok())->Wait().ok());
  EXPECT_TRUE(q->Stop(absl::InfiniteDuration()));
  q->Abort("too late");
  EXPECT_EQ(q->broken(), absl::AbortedError("too late"));
  absl::MutexLock l(&log.mu);
  EXPECT_TRUE(log.breaks.empty());
}

}  // namespace
}  // namespace yoke::collective
