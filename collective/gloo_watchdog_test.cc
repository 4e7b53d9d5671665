// Timeouts, hang reports, Abort and dead peers on the Gloo backend: nothing
// may hang or crash, and every failure names the op and the ranks involved.
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "collective/gloo_communicator.h"
#include "collective/testing/gloo_ranks.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

using ::testing::HasSubstr;

std::vector<std::unique_ptr<Communicator>> Connect(int n, Store* store, const GlooOptions& o) {
  return testing::ConnectGloo(n, store, o);
}

GlooOptions FastGrace() {
  GlooOptions o;
  o.hang_grace = absl::Seconds(1);
  return o;
}

TEST(GlooWatchdogTest, TimeoutNamesTheRankThatNeverArrived) {
  InMemoryStore store;
  auto comms = Connect(2, &store, FastGrace());
  std::vector<float> buf(1000, 1);
  AllreduceOptions o;
  o.timeout = absl::Seconds(2);
  o.tag = "bucket 3";
  const absl::Time start = absl::Now();
  // Rank 1 never calls allreduce.
  absl::Status s = comms[0]->Allreduce(Buffer{buf.data(), 1000}, o)->Wait();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("allreduce #1 (bucket 3) on rank 0 of 2 timed out after 2s"));
  EXPECT_THAT(s.message(), HasSubstr("ranks 1 never arrived"));
  EXPECT_GE(took, absl::Seconds(2));
  EXPECT_LT(took, absl::Seconds(2 + 1 + 2)) << "timeout + grace + slack";
  EXPECT_EQ(comms[0]->completed_seq(), 0);

  // Broken: later ops fail fast with the same status.
  const absl::Time later = absl::Now();
  absl::Status again = comms[0]->Barrier({})->Wait();
  EXPECT_EQ(again, s);
  EXPECT_LT(absl::Now() - later, absl::Milliseconds(500));

  // The late rank learnt of it through the hang check and fails fast too.
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time late = absl::Now();
  absl::Status r1 = comms[1]->Allreduce(Buffer{buf.data(), 1000}, o)->Wait();
  EXPECT_EQ(r1.code(), absl::StatusCode::kAborted) << r1;
  EXPECT_THAT(r1.message(), HasSubstr("rank 1 of 2: communicator broken by a peer's failure: "
                                      "allreduce #1 (bucket 3) on rank 0 of 2 timed out"));
  EXPECT_LT(absl::Now() - late, absl::Milliseconds(500));
}

TEST(GlooWatchdogTest, AbortFromAnotherThreadUnblocksWait) {
  InMemoryStore store;
  auto comms = Connect(2, &store, FastGrace());
  std::vector<float> buf(1000, 1);
  AllreduceOptions o;
  o.timeout = absl::Seconds(60);
  auto w = comms[0]->Allreduce(Buffer{buf.data(), 1000}, o);
  std::thread watchdog([&] {
    absl::SleepFor(absl::Milliseconds(200));
    comms[0]->Abort("watchdog: job cancelled");
    comms[0]->Abort("second abort is a no-op");
  });
  const absl::Time start = absl::Now();
  absl::Status s = w->Wait();
  watchdog.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "watchdog: job cancelled");
  EXPECT_TRUE(w->IsCompleted());
  EXPECT_EQ(comms[0]->Barrier({})->Wait(), s);
  // Destruction must not wait out the 60 s op still inside Gloo.
  const absl::Time destroy = absl::Now();
  comms.clear();
  EXPECT_LT(absl::Now() - destroy, absl::Seconds(5));
}

TEST(GlooWatchdogTest, DeadPeerFailsWithoutHangingAndIsNamed) {
  InMemoryStore store;
  auto comms = Connect(2, &store, FastGrace());
  std::vector<float> buf(1 << 16, 1);
  ASSERT_TRUE(comms[1]->Barrier({}).get() != nullptr);
  comms[0]->Barrier({})->Wait().IgnoreError();
  comms[1].reset();  // rank 1 goes away (closes its connections)
  AllreduceOptions o;
  o.timeout = absl::Seconds(30);
  const absl::Time start = absl::Now();
  absl::Status s = comms[0]->Allreduce(Buffer{buf.data(), 1 << 16}, o)->Wait();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("allreduce #2 on rank 0 of 2 failed"));
  EXPECT_THAT(s.message(), HasSubstr("ranks 1 did not answer"));
}

TEST(GlooWatchdogTest, ThreeRanksNameOnlyTheMissingOne) {
  InMemoryStore store;
  auto comms = Connect(3, &store, FastGrace());
  std::vector<std::vector<float>> bufs(3, std::vector<float>(100, 1));
  Options o;
  o.timeout = absl::Seconds(2);
  std::vector<absl::Status> st(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] { st[r] = comms[r]->Barrier(o)->Wait(); });
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < 2; ++r) {
    // Either this rank's own report, or (if the other rank reported first)
    // the peer's report: both name rank 2 through the reporting rank.
    EXPECT_TRUE(absl::StrContains(st[r].message(), "ranks 2 never arrived") ||
                absl::StrContains(st[r].message(), "communicator broken by a peer's failure"))
        << st[r];
  }
  // Both time out at about the same moment, so each may be broken by the
  // other's hang-check request (ABORTED, quoting the peer's timeout) before
  // its own verdict lands; either way every status says what timed out.
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(st[r].code() == absl::StatusCode::kDeadlineExceeded ||
                st[r].code() == absl::StatusCode::kAborted)
        << st[r];
    EXPECT_THAT(st[r].message(), HasSubstr("barrier #1 on rank ")) << st[r];
    EXPECT_THAT(st[r].message(), HasSubstr("timed out after 2s")) << st[r];
  }
}

}  // namespace
}  // namespace yoke::collective
