#include "coordinator/worker_registry.h"

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace yoke::server {
namespace {

std::vector<v1::Device> Cpus(int n) {
  std::vector<v1::Device> d(n);
  for (int i = 0; i < n; ++i) {
    d[i].set_kind("cpu");
    d[i].set_index(i);
  }
  return d;
}

TEST(WorkerRegistryTest, AssignsIdsAndKeepsARequestedOne) {
  common::FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  EXPECT_EQ(reg.Register("", "host-a", Cpus(1)), "w-1");
  EXPECT_EQ(reg.Register("w-7", "host-b", Cpus(2)), "w-7");
  EXPECT_EQ(reg.Register("", "host-c", Cpus(1)), "w-8");  // never reuses a seen number
  EXPECT_EQ(reg.Register("w-1", "host-a", Cpus(3)), "w-1");
  ASSERT_NE(reg.Find("w-1"), nullptr);
  EXPECT_EQ(reg.Find("w-1")->devices.size(), 3u);
  EXPECT_EQ(reg.workers().size(), 3u);
}

TEST(WorkerRegistryTest, MissedDeadlineIsReportedOnceWithAReason) {
  common::FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  reg.Register("", "a", Cpus(1));
  reg.Register("", "b", Cpus(1));
  clock.Advance(absl::Seconds(6));
  EXPECT_TRUE(reg.Heartbeat("w-1").ok());
  clock.Advance(absl::Seconds(5));  // w-2: 11 s silent, w-1: 5 s
  std::vector<LostWorker> lost = reg.CheckLiveness();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, "w-2");
  EXPECT_EQ(lost[0].reason, "worker w-2 missed heartbeats for 10s");
  EXPECT_FALSE(reg.IsAlive("w-2"));
  EXPECT_TRUE(reg.IsAlive("w-1"));
  EXPECT_TRUE(reg.CheckLiveness().empty());  // reported once
  // A lost worker must register again.
  EXPECT_EQ(reg.Heartbeat("w-2").code(), absl::StatusCode::kNotFound);
  reg.Register("w-2", "b", Cpus(1));
  EXPECT_TRUE(reg.IsAlive("w-2"));
  EXPECT_TRUE(reg.Heartbeat("w-2").ok());
}

TEST(WorkerRegistryTest, ExactlyAtTheDeadlineIsStillAlive) {
  common::FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  reg.Register("", "a", Cpus(1));
  clock.Advance(absl::Seconds(10));
  EXPECT_TRUE(reg.CheckLiveness().empty());
  clock.Advance(absl::Milliseconds(1));
  EXPECT_EQ(reg.CheckLiveness().size(), 1u);
}

TEST(WorkerRegistryTest, UnknownWorkerHeartbeatIsNotFound) {
  common::FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  EXPECT_EQ(reg.Heartbeat("w-3").code(), absl::StatusCode::kNotFound);
}

TEST(WorkerRegistryTest, ExpectedWorkerGetsOneDeadlineToRegister) {
  common::FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  reg.Expect("w-4");
  reg.Expect("w-5");
  EXPECT_FALSE(reg.IsAlive("w-4"));  // not schedulable until it registers
  EXPECT_EQ(reg.Heartbeat("w-4").code(), absl::StatusCode::kNotFound);
  clock.Advance(absl::Seconds(9));
  reg.Register("w-4", "a", Cpus(1));
  EXPECT_EQ(reg.Register("", "new", Cpus(1)), "w-6");
  clock.Advance(absl::Seconds(2));
  std::vector<LostWorker> lost = reg.CheckLiveness();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].id, "w-5");
  EXPECT_EQ(lost[0].reason,
            "worker w-5 did not register again within 10s of the coordinator's restart");
}

TEST(WorkerRegistryTest, LostWorkersAreForgottenAfterAnHour) {
  common::FakeClock clock;
  WorkerRegistry reg(&clock, absl::Seconds(10));
  reg.Register("", "a", Cpus(1));
  clock.Advance(absl::Seconds(11));
  EXPECT_EQ(reg.CheckLiveness().size(), 1u);
  clock.Advance(absl::Minutes(30));
  reg.CheckLiveness();
  EXPECT_NE(reg.Find("w-1"), nullptr);
  clock.Advance(absl::Minutes(31));
  reg.CheckLiveness();
  EXPECT_EQ(reg.Find("w-1"), nullptr);
}

}  // namespace
}  // namespace yoke::server
