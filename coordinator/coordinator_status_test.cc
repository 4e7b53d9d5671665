// The pure steps of applying a worker's AttemptStatus
// (coordinator/coordinator_internal.h): the log lines stored, the epoch
// history, the dashboard curve and the exit reason. The Coordinator itself,
// through its API, is coordinator_test.cc and coordinator_{jobs,workers,
// lifecycle}_test.cc.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_internal.h"
#include "gtest/gtest.h"

namespace yoke::server::coordinator_internal {
namespace {

TEST(LogLinesToStoreTest, StampsEachLineCutsLongOnesAndCapsTheCount) {
  v1::AttemptStatus st;
  for (int i = 0; i < kMaxLogLines + 2; ++i) {
    v1::LogLine* l = st.add_logs();
    l->set_text(absl::StrCat("line ", i));
    l->set_time_ms(i == 0 ? 0 : 1000 + i);
  }
  st.mutable_logs(1)->set_text(std::string(kMaxLogText + 10, 'x'));

  const std::vector<v1::LogLine> lines = LogLinesToStore(st, 3, 2, "w-5", 77);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kMaxLogLines + 1));
  for (const v1::LogLine& l : lines) {
    EXPECT_EQ(l.attempt(), 3);
    EXPECT_EQ(l.rank(), 2);
    EXPECT_EQ(l.worker_id(), "w-5");
  }
  EXPECT_EQ(lines[0].time_ms(), 77);  // unset: the coordinator's time
  EXPECT_EQ(lines[2].time_ms(), 1002);
  EXPECT_EQ(lines[1].text(), std::string(kMaxLogText, 'x'));
  EXPECT_EQ(lines[2].text(), "line 2");
  EXPECT_EQ(lines[kMaxLogLines - 1].text(), absl::StrCat("line ", kMaxLogLines - 1));
  EXPECT_EQ(lines.back().text(), "[yoke: 2 more lines dropped]");
  EXPECT_EQ(lines.back().time_ms(), lines[kMaxLogLines - 1].time_ms());
}

TEST(LogLinesToStoreTest, AFewLinesAreKeptAsTheyCame) {
  v1::AttemptStatus st;
  EXPECT_TRUE(LogLinesToStore(st, 1, 0, "w-1", 5).empty());
  st.add_logs()->set_text("a");
  st.add_logs()->set_text("b");
  const std::vector<v1::LogLine> lines = LogLinesToStore(st, 1, 0, "w-1", 5);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text(), "a");
  EXPECT_EQ(lines[1].text(), "b");
}

std::vector<int64_t> Steps(const JobCurve& curve) {
  std::vector<int64_t> out;
  for (const CurvePoint& p : curve.points) out.push_back(p.step);
  return out;
}

TEST(AddCurvePointTest, OnePointPerStepAndAFullCurveDoublesItsStride) {
  JobCurve curve;
  v1::StepProgress p;
  for (int64_t step : {1, 2, 2, 3}) {
    p.set_step(step);
    p.set_loss(10.0 / step);
    AddCurvePoint(p, 4, &curve);
  }
  EXPECT_EQ(Steps(curve), (std::vector<int64_t>{1, 2, 3}));
  p.set_step(4);
  AddCurvePoint(p, 4, &curve);
  // Full: every other point goes, and step 4 (report 3, off the doubled
  // stride) stays only as the newest.
  EXPECT_EQ(Steps(curve), (std::vector<int64_t>{1, 3, 4}));
  p.set_step(5);
  p.set_loss(0.25);
  p.set_accuracy(0.75);
  AddCurvePoint(p, 4, &curve);
  EXPECT_EQ(Steps(curve), (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(curve.points[1].loss, 10.0 / 3);
  EXPECT_EQ(curve.points[2].loss, 0.25);
  EXPECT_EQ(curve.points[2].accuracy, 0.75);
}

// However long the job, the curve stays bounded and evenly spread over the
// whole run: the old part is not thinned harder than the new one.
TEST(AddCurvePointTest, ALongRunKeepsAnEvenSpacingFromTheFirstStep) {
  constexpr size_t kMax = 16;
  JobCurve curve;
  v1::StepProgress p;
  for (int64_t step = 1; step <= 10'000; ++step) {
    p.set_step(step);
    AddCurvePoint(p, kMax, &curve);
    ASSERT_LE(curve.points.size(), kMax);
    ASSERT_EQ(curve.points.back().step, step);
  }
  const std::vector<int64_t> steps = Steps(curve);
  ASSERT_GE(steps.size(), kMax / 2);
  EXPECT_EQ(steps.front(), 1);
  const int64_t spacing = steps[1] - steps[0];
  for (size_t i = 1; i + 1 < steps.size(); ++i) {
    EXPECT_EQ(steps[i] - steps[i - 1], spacing) << "between points " << i - 1 << " and " << i;
  }
  EXPECT_LE(steps.back() - steps[steps.size() - 2], spacing);   // the newest
  EXPECT_LE(spacing * static_cast<int64_t>(kMax), 2 * 10'000);  // no coarser than needed
}

TEST(ExitReasonTest, NamesTheTrainerItsRanksAndHowItEnded) {
  v1::Attempt one;
  one.set_world_size(1);
  v1::Assignment* s = one.add_assignments();
  s->set_worker_id("w-1");
  v1::AttemptStatus st;
  st.set_exit_code(1);
  st.set_reason("data.train.path: not found");
  EXPECT_EQ(ExitReason(one, *s, st),
            "trainer on w-1 exited with code 1: data.train.path: not found");
  st.clear_reason();
  EXPECT_EQ(ExitReason(one, *s, st), "trainer on w-1 exited with code 1");

  v1::Attempt two;
  two.set_world_size(2);
  v1::Assignment* r1 = two.add_assignments();
  r1->set_worker_id("w-2");
  r1->set_first_rank(1);
  r1->set_num_replicas(1);
  st.set_exit_code(128 + 9);
  st.set_reason("killed by signal 9 (Killed); last output: step 20");
  EXPECT_EQ(ExitReason(two, *r1, st),
            "trainer of rank 1 on w-2 killed by signal 9 (Killed); last output: step 20");
  st.set_reason("out of memory");
  EXPECT_EQ(ExitReason(two, *r1, st), "trainer of rank 1 on w-2 killed by signal 9: out of memory");
}

// In a pipeline job rank r runs stage r % p + 1 (trainer/trainer_pipeline.cc),
// so a failure names the stage too; a share of several ranks, each of theirs.
TEST(ExitReasonTest, APipelineFailureNamesTheStage) {
  v1::Attempt a;
  a.set_world_size(4);  // 2 pipelines of 2 stages
  v1::Assignment* one = a.add_assignments();
  one->set_worker_id("w-2");
  one->set_first_rank(3);
  one->set_num_replicas(1);
  v1::AttemptStatus st;
  st.set_exit_code(137);
  st.set_reason("out of memory");
  EXPECT_EQ(ExitReason(a, *one, st, 2),
            "trainer of rank 3 (stage 2 of 2) on w-2 killed by signal 9: out of memory");
  v1::Assignment* both = a.add_assignments();
  both->set_worker_id("w-1");
  both->set_first_rank(0);
  both->set_num_replicas(2);
  EXPECT_EQ(ExitReason(a, *both, st, 2),
            "trainer of ranks 0-1 (stages 1,2 of 2) on w-1 killed by signal 9: out of memory");
  EXPECT_EQ(ExitReason(a, *one, st, 1),
            "trainer of rank 3 on w-2 killed by signal 9: out of memory");
}

// A trainer's exit that echoes a peer's failure, in each transport's words
// (the shared-memory one as a killed pipeline stage's neighbour reported
// it), waits for the peer's own exit; a failure of the trainer's own does
// not.
TEST(PeerCausedTest, EachTransportsEchoOfAPeersFailure) {
  using coordinator_internal::PeerCaused;
  for (const char* echo :
       {"allreduce #12 (step counts) on rank 0 of 2 failed: Connection closed by peer "
        "[127.0.0.1]:40123",
        "Read error [10.0.0.2]:5000: Connection reset by peer",
        "rank 1 of 2: communicator broken by a peer's failure: rank 0 exited",
        "allreduce #890 (step counts) on rank 0 of 2 failed: local rank 1 (pid 31849) died "
        "while this rank waited for it (free slots, shared memory)",
        "allreduce #3 on rank 0 of 4: local rank 2 broke the shared-memory group (its op "
        "failed or it was aborted)"}) {
    EXPECT_TRUE(PeerCaused(echo)) << echo;
  }
  for (const char* own : {"out of memory: 512 MiB for the parameters",
                          "training diverged: the loss became nan at step 3 (epoch 1)",
                          "allreduce #4 timed out after 30s: local ranks 1 never arrived"}) {
    EXPECT_FALSE(PeerCaused(own)) << own;
  }
}

}  // namespace
}  // namespace yoke::server::coordinator_internal
