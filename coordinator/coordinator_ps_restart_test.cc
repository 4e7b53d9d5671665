// A parameter-server job's share restarted alone (Coordinator::
// RestartShareAlone, coordinator/coordinator_status.cc), through the public
// API with a fake clock (coordinator/testing/coordinator_fixture.h): under
// async or bounded a failed share of replicas only comes back as its next
// incarnation in the same attempt while the others run on, within
// restart.max_restarts; anything else still fails the attempt.
#include <string>
#include <vector>

#include "coordinator/coordinator.h"
#include "coordinator/testing/coordinator_fixture.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::server::coordinator_testing {
namespace {

using testing::HasSubstr;

class PsRestartTest : public MultiWorkerTest {
 protected:
  // Two workers of one replica each and one PS task (on rank 0's worker,
  // the chief), under `consistency`.
  void StartPsJob(const std::string& consistency, int max_restarts) {
    StartTwoRanks(
        {"distribution.strategy=parameter_server", "distribution.parameter_servers=1",
         "distribution.consistency=" + consistency,
         "distribution.max_staleness=" + std::string(consistency == "bounded" ? "1" : "0"),
         "restart.max_restarts=" + std::to_string(max_restarts)});
    const v1::Attempt a = Job(id_).attempts(0);
    ASSERT_EQ(a.world_size(), 3);
    for (const v1::Assignment& s : a.assignments()) {
      (s.first_rank() == 0 ? chief_ : other_) = s.worker_id();
    }
    ASSERT_FALSE(chief_.empty() || other_.empty());
  }

  // The other share's status, of its `incarnation`.
  v1::AttemptStatus Of(v1::AttemptStatus st, int incarnation) {
    st.set_incarnation(incarnation);
    return st;
  }

  // The incarnation the coordinator wants `worker` to run in attempt 1
  // (-1: it lists no attempt 1).
  int Wanted(const v1::HeartbeatResponse& r) {
    for (const v1::DesiredAttempt& d : r.desired()) {
      if (d.job_id() == id_ && d.attempt() == 1) return d.incarnation();
    }
    return -1;
  }

  int IncarnationOf(const std::string& worker) {
    const v1::Job job = Job(id_);
    for (const v1::Assignment& s : job.attempts(0).assignments()) {
      if (s.worker_id() == worker) return s.incarnation();
    }
    return -1;
  }

  std::string chief_, other_;
};

TEST_F(PsRestartTest, AReplicaShareKilledUnderAsyncComesBackAloneWhileTheChiefRunsOn) {
  StartPsJob("async", 2);
  const v1::HeartbeatResponse r =
      Beat(other_, {Of(Exit(1, 128 + 9, "killed by signal 9 (Killed)"), 0)});
  EXPECT_EQ(Wanted(r), 1) << "the worker is told to run incarnation 1 of the same attempt";
  v1::Job job = Job(id_);
  EXPECT_EQ(job.state(), v1::JOB_RUNNING);
  EXPECT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(IncarnationOf(other_), 1);
  EXPECT_EQ(IncarnationOf(chief_), 0);
  EXPECT_THAT(job.reason(), HasSubstr("killed by signal 9"));
  EXPECT_THAT(job.reason(), HasSubstr("restarted alone as its incarnation 1"));
  EXPECT_THAT(job.reason(), HasSubstr("(1 of 2 restarts)"));
  EXPECT_EQ(Wanted(Beat(chief_, {Progress(1, 40, 0)})), 0) << "the chief runs on, untouched";

  // The worker reports the dead incarnation until its next starts: that is
  // not a second failure.
  EXPECT_EQ(Wanted(Beat(other_, {Of(Exit(1, 128 + 9, "killed by signal 9 (Killed)"), 0)})), 1);
  EXPECT_EQ(IncarnationOf(other_), 1);
  EXPECT_EQ(Job(id_).state(), v1::JOB_RUNNING);

  Beat(other_, {Of(Status(id_, 1, v1::AttemptStatus::RUNNING), 1)});
  Beat(other_, {Of(Status(id_, 1, v1::AttemptStatus::EXITED), 1)});
  EXPECT_EQ(Job(id_).state(), v1::JOB_RUNNING) << "the chief has not finished";
  Beat(chief_, {Status(id_, 1, v1::AttemptStatus::EXITED)});
  job = Job(id_);
  EXPECT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason();
  EXPECT_EQ(job.attempts_size(), 1);
  EXPECT_EQ(job.reason(), "");
  // The incarnation is kept with the attempt, in the store.
  Restart();
  EXPECT_EQ(IncarnationOf(other_), 1);
}

TEST_F(PsRestartTest, RestartsAloneCountAgainstMaxRestarts) {
  StartPsJob("bounded", 1);
  EXPECT_EQ(Wanted(Beat(other_, {Of(Exit(1, 1, "step 10: loss is NaN"), 0)})), 1);
  EXPECT_EQ(Job(id_).state(), v1::JOB_RUNNING);
  // The second failure finds no restart left: the job fails, and the chief
  // is no longer wanted.
  const v1::HeartbeatResponse r = Beat(other_, {Of(Exit(1, 1, "step 20: loss is NaN"), 1)});
  EXPECT_EQ(Wanted(r), -1);
  const v1::Job job = Job(id_);
  EXPECT_EQ(job.state(), v1::JOB_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("step 20: loss is NaN"));
  EXPECT_THAT(job.reason(), HasSubstr("after 1 restarts of 1"));
  EXPECT_EQ(Wanted(Beat(chief_)), -1);
}

struct FailureCase {
  std::string name, consistency;
  bool chief;  // the chief's share (rank 0 and the PS task) fails
  int code;
  std::string reason;
};

class PsFailureTest : public PsRestartTest, public testing::WithParamInterface<FailureCase> {};

TEST_P(PsFailureTest, StillFailsTheAttempt) {
  const FailureCase& c = GetParam();
  StartPsJob(c.consistency, 3);
  Beat(c.chief ? chief_ : other_, {Exit(1, c.code, c.reason)});
  const v1::Job job = Job(id_);
  EXPECT_NE(job.state(), v1::JOB_RUNNING);
  EXPECT_EQ(IncarnationOf(c.chief ? chief_ : other_), 0);
  EXPECT_EQ(job.attempts(0).state(), v1::ATTEMPT_FAILED);
  EXPECT_THAT(job.attempts(0).reason(), HasSubstr(c.reason));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PsFailureTest,
    testing::Values(
        // sync steps every replica together
        FailureCase{"sync", "sync", false, 128 + 9, "killed by signal 9 (Killed)"},
        // the chief's share holds the PS task, and rank 0 evaluates
        FailureCase{"chief", "async", true, 128 + 9, "killed by signal 9 (Killed)"},
        // a bad input fails the same way again
        FailureCase{"bad_input", "async", false, 2, "data.train.images: cannot open /x"},
        FailureCase{"out_of_memory", "async", false, 128 + 9,
                    "killed by signal 9: out of memory (the worker's memory cgroup)"}),
    [](const testing::TestParamInfo<FailureCase>& info) { return info.param.name; });

}  // namespace
}  // namespace yoke::server::coordinator_testing
