// The Coordinator's worker protocol (coordinator/coordinator_workers.cc),
// through its public API with a fake clock
// (coordinator/testing/coordinator_fixture.h): registration, draining, and
// the desired state sent back (the spec until the worker lists the attempt,
// then only its digest).
#include <string>

#include "coordinator/coordinator.h"
#include "coordinator/testing/coordinator_fixture.h"
#include "gtest/gtest.h"
#include "security/sha256.h"

namespace yoke::server::coordinator_testing {
namespace {

TEST_F(CoordinatorTest, SpecGoesOutUntilTheWorkerListsTheAttemptThenOnlyItsDigest) {
  const std::string w = Register(1);
  auto id = coord_->Submit(Spec({"name=digest-me"}), 0);
  ASSERT_TRUE(id.ok()) << id.status();
  // Handed out: the spec, and the SHA-256 of its bytes.
  v1::HeartbeatResponse first = Beat(w);
  ASSERT_EQ(first.desired_size(), 1);
  ASSERT_TRUE(first.desired(0).has_spec());
  EXPECT_EQ(first.desired(0).spec().name(), "digest-me");
  const std::string digest = first.desired(0).spec_digest();
  EXPECT_EQ(digest.size(), 32u);
  EXPECT_EQ(digest, common::Sha256(first.desired(0).spec().SerializeAsString()));
  // Not listed yet (the reply was lost): the spec goes out again.
  v1::HeartbeatResponse second = Beat(w);
  ASSERT_EQ(second.desired_size(), 1);
  EXPECT_EQ(second.desired(0).spec().name(), "digest-me");
  // Listed, in any phase: identity and digest, no spec.
  for (auto phase : {v1::AttemptStatus::STARTING, v1::AttemptStatus::RUNNING}) {
    v1::HeartbeatResponse r = Beat(w, {Status(*id, 1, phase)});
    ASSERT_EQ(r.desired_size(), 1);
    EXPECT_EQ(r.desired(0).job_id(), *id);
    EXPECT_EQ(r.desired(0).attempt(), 1);
    EXPECT_FALSE(r.desired(0).has_spec()) << r.desired(0).spec().name();
    EXPECT_EQ(r.desired(0).spec_digest(), digest);
    EXPECT_EQ(r.desired(0).world_size(), 1);
    ASSERT_EQ(r.desired(0).devices_size(), 1);
  }
  // After a restart the worker registers again listing the attempt: its
  // heartbeats still get no spec, and the digest of the reloaded spec.
  Restart();
  v1::RegisterWorkerRequest again = Reg(1, w);
  *again.add_attempts() = Status(*id, 1, v1::AttemptStatus::RUNNING);
  ASSERT_TRUE(coord_->RegisterWorker(again).ok());
  v1::HeartbeatResponse after = Beat(w, {Status(*id, 1, v1::AttemptStatus::RUNNING)});
  ASSERT_EQ(after.desired_size(), 1);
  EXPECT_FALSE(after.desired(0).has_spec());
  EXPECT_EQ(after.desired(0).spec_digest(), digest);
}

TEST_F(CoordinatorTest, DrainingWorkerGetsNoNewAttempts) {
  const std::string w1 = Register(1);
  const std::string w2 = Register(1);
  v1::HeartbeatRequest drain;
  drain.set_worker_id(w1);
  drain.set_draining(true);
  ASSERT_TRUE(coord_->Heartbeat(drain).ok());
  auto id = coord_->Submit(Spec(), 0);
  ASSERT_TRUE(id.ok()) << id.status();
  // The job lands on w-2, never on the draining w-1.
  EXPECT_EQ(Beat(w1).desired_size(), 0);
  v1::HeartbeatResponse r2 = Beat(w2);
  ASSERT_EQ(r2.desired_size(), 1);
  EXPECT_EQ(r2.desired(0).job_id(), *id);
  // A second job waits: w-1 does not count as free.
  auto second = coord_->Submit(Spec(), 0);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(Job(*second).state(), v1::JOB_PENDING);
  EXPECT_EQ(Beat(w1).desired_size(), 0);
  // Registering again (the worker came back) makes it eligible.
  Register(1, w1);
  EXPECT_EQ(Beat(w1).desired_size(), 1);
}

TEST_F(CoordinatorTest, RegistrationRejectsBadDevices) {
  v1::RegisterWorkerRequest r = Reg(2);
  r.mutable_devices(1)->set_index(0);
  auto dup = coord_->RegisterWorker(r);
  ASSERT_EQ(dup.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("devices[1].index"), std::string::npos);
  r = Reg(1);
  r.mutable_devices(0)->set_kind("tpu");
  EXPECT_EQ(coord_->RegisterWorker(r).status().code(), absl::StatusCode::kInvalidArgument);
  v1::HeartbeatRequest hb;
  EXPECT_EQ(coord_->Heartbeat(hb).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoke::server::coordinator_testing
