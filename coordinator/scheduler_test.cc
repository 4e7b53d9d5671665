#include "coordinator/scheduler.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace yoke::server {
namespace {

WorkerCapacity Worker(const std::string& id, int cpus, int gpus = 0) {
  WorkerCapacity w;
  w.id = id;
  for (int i = 0; i < cpus; ++i) {
    v1::Device* d = &w.devices.emplace_back();
    d->set_kind("cpu");
    d->set_index(i);
  }
  for (int i = 0; i < gpus; ++i) {
    v1::Device* d = &w.devices.emplace_back();
    d->set_kind("cuda");
    d->set_index(i);
  }
  return w;
}

PendingJob Job(const std::string& id, int workers, int per_worker, const std::string& kind = "cpu",
               int priority = 0, int64_t t = 0) {
  PendingJob j;
  j.id = id;
  j.shape.workers = workers;
  j.shape.devices_per_worker = per_worker;
  j.shape.kind = kind;
  j.priority = priority;
  j.create_time_ms = t;
  return j;
}

TEST(SchedulerTest, ShapeDefaultsToOneCpuReplica) {
  GangShape s = ShapeOf(v1::JobSpec());
  EXPECT_EQ(s.workers, 1);
  EXPECT_EQ(s.devices_per_worker, 1);
  EXPECT_EQ(s.kind, "cpu");
  v1::JobSpec spec;
  spec.mutable_distribution()->set_workers(3);
  spec.mutable_distribution()->set_devices_per_worker(2);
  spec.mutable_distribution()->set_device("cuda");
  s = ShapeOf(spec);
  EXPECT_EQ(s.devices(), 6);
  EXPECT_EQ(s.ranks(), 6);
  spec.mutable_distribution()->set_strategy("parameter_server");
  spec.mutable_distribution()->set_parameter_servers(2);
  EXPECT_EQ(ShapeOf(spec).ranks(), 8);
  EXPECT_EQ(ShapeOf(spec).devices(), 6);
  EXPECT_EQ(s.kind, "cuda");
}

// A parameter-server job: the PS tasks take ranks but no devices, spread
// over the workers' shares (PS 0 and 2 with w-1's replicas, PS 1 with w-2's),
// and a worker with exactly its replicas' devices free still fits.
TEST(SchedulerTest, PsTasksRideInTheWorkersSharesWithoutDevices) {
  PendingJob j = Job("job-1", 2, 1);
  j.shape.ps_tasks = 3;
  ScheduleResult r = Schedule({j}, {Worker("w-1", 1), Worker("w-2", 1)});
  ASSERT_EQ(r.placed.size(), 1u) << (r.pending.empty() ? "" : r.pending.begin()->second);
  const Placement& p = r.placed[0];
  EXPECT_EQ(p.world_size, 5);
  ASSERT_EQ(p.assignments.size(), 2u);
  EXPECT_EQ(p.assignments[0].first_rank(), 0);
  EXPECT_EQ(p.assignments[0].num_replicas(), 3);
  EXPECT_EQ(p.assignments[0].devices_size(), 1);
  EXPECT_EQ(p.assignments[1].first_rank(), 3);
  EXPECT_EQ(p.assignments[1].num_replicas(), 2);
  EXPECT_EQ(p.assignments[1].devices_size(), 1);
  v1::Attempt a;
  for (const auto& s : p.assignments) *a.add_assignments() = s;
  EXPECT_EQ(AttemptDevices(a), 2);
}

TEST(SchedulerTest, GangGetsContiguousRanksAndLowestFreeDevices) {
  WorkerCapacity w1 = Worker("w-1", 4);
  w1.allocated["cpu"] = {0, 2};  // free: 1, 3
  WorkerCapacity w2 = Worker("w-2", 2);
  ScheduleResult r = Schedule({Job("job-1", 2, 2)}, {w2, w1});
  ASSERT_EQ(r.placed.size(), 1u);
  const Placement& p = r.placed[0];
  EXPECT_EQ(p.world_size, 4);
  ASSERT_EQ(p.assignments.size(), 2u);
  // Workers in id order; ranks 0-1 on w-1 (its free devices 1 and 3), 2-3 on w-2.
  EXPECT_EQ(p.assignments[0].worker_id(), "w-1");
  EXPECT_EQ(p.assignments[0].first_rank(), 0);
  EXPECT_EQ(p.assignments[0].num_replicas(), 2);
  ASSERT_EQ(p.assignments[0].devices_size(), 2);
  EXPECT_EQ(p.assignments[0].devices(0), 1);
  EXPECT_EQ(p.assignments[0].devices(1), 3);
  EXPECT_EQ(p.assignments[1].worker_id(), "w-2");
  EXPECT_EQ(p.assignments[1].first_rank(), 2);
  EXPECT_EQ(p.assignments[1].devices(0), 0);
  EXPECT_EQ(p.assignments[1].devices(1), 1);
  EXPECT_TRUE(r.pending.empty());
}

TEST(SchedulerTest, AllOrNothingWithAReason) {
  ScheduleResult r = Schedule({Job("job-1", 2, 1)}, {Worker("w-1", 1)});
  EXPECT_TRUE(r.placed.empty());
  ASSERT_EQ(r.pending.count("job-1"), 1u);
  EXPECT_EQ(r.pending["job-1"],
            "needs 2 workers with 1 cpu device each; free: 1 worker (w-1: 1 cpu)");
}

TEST(SchedulerTest, PlacedJobsUseUpDevicesWithinOnePass) {
  ScheduleResult r = Schedule({Job("job-1", 1, 1, "cpu", 0, 1), Job("job-2", 1, 1, "cpu", 0, 2),
                               Job("job-3", 1, 1, "cpu", 0, 3)},
                              {Worker("w-1", 1), Worker("w-2", 1)});
  ASSERT_EQ(r.placed.size(), 2u);
  EXPECT_EQ(r.placed[0].job_id, "job-1");
  EXPECT_EQ(r.placed[1].job_id, "job-2");
  EXPECT_NE(r.placed[0].assignments[0].worker_id(), r.placed[1].assignments[0].worker_id());
  EXPECT_EQ(r.pending["job-3"],
            "needs 1 worker with 1 cpu device; free: no worker has a free cpu device");
}

TEST(SchedulerTest, PriorityFirstThenFifo) {
  ScheduleResult r = Schedule({Job("job-1", 1, 1, "cpu", 0, 1), Job("job-2", 1, 1, "cpu", 5, 2),
                               Job("job-3", 1, 1, "cpu", 5, 3)},
                              {Worker("w-1", 2)});
  ASSERT_EQ(r.placed.size(), 2u);
  EXPECT_EQ(r.placed[0].job_id, "job-2");
  EXPECT_EQ(r.placed[1].job_id, "job-3");
  EXPECT_EQ(r.pending.count("job-1"), 1u);
}

TEST(SchedulerTest, SmallJobsBackfillAroundTheDevicesABlockedJobHolds) {
  // job-1 needs all 4 cpus of w-1, where 3 are busy: it holds the free one.
  // job-2 fits on w-2 and starts; job-3 would fit only with the held device.
  WorkerCapacity w1 = Worker("w-1", 4);
  w1.allocated["cpu"] = {0, 1, 2};
  ScheduleResult r = Schedule({Job("job-1", 1, 4, "cpu", 0, 1), Job("job-2", 1, 1, "cpu", 0, 2),
                               Job("job-3", 1, 2, "cpu", 0, 3)},
                              {w1, Worker("w-2", 2)});
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job_id, "job-2");
  EXPECT_EQ(r.placed[0].assignments[0].worker_id(), "w-2");
  EXPECT_EQ(r.pending["job-1"],
            "needs 1 worker with 4 cpu devices; free: 2 workers (w-2: 2 cpu, w-1: 1 cpu); held "
            "for it until the rest free up: w-1: 1 cpu");
  EXPECT_EQ(r.pending["job-3"],
            "needs 1 worker with 2 cpu devices; free: 1 worker (w-2: 1 cpu); 1 more are held for "
            "job-1 (priority 0), which starts first");
}

TEST(SchedulerTest, AStreamOfSmallJobsCannotDelayTheHeldJob) {
  // Pass after pass, w-1's jobs end one by one while small jobs keep coming;
  // none of them gets a device of w-1, so job-1 starts when the last ends.
  std::set<int> busy = {0, 1, 2};
  int64_t t = 10;
  for (int pass = 0; pass < 4; ++pass) {
    WorkerCapacity w1 = Worker("w-1", 4);
    w1.allocated["cpu"] = busy;
    const std::string small = "small-" + std::to_string(pass);
    ScheduleResult r =
        Schedule({Job("job-1", 1, 4, "cpu", 0, 1), Job(small, 1, 1, "cpu", 0, ++t)}, {w1});
    if (busy.empty()) {
      ASSERT_EQ(r.placed.size(), 1u) << "pass " << pass;
      EXPECT_EQ(r.placed[0].job_id, "job-1");
      EXPECT_EQ(r.pending.count(small), 1u);
      break;
    }
    EXPECT_TRUE(r.placed.empty()) << "pass " << pass << ": " << r.placed[0].job_id;
    EXPECT_NE(r.pending[small].find("held for job-1"), std::string::npos) << r.pending[small];
    busy.erase(busy.begin());
  }
  EXPECT_TRUE(busy.empty());
}

TEST(SchedulerTest, TheBlockedJobHoldsTheWorkersWithTheMostFreeDevices) {
  WorkerCapacity w1 = Worker("w-1", 4);
  w1.allocated["cpu"] = {0, 1, 2};  // 1 free
  WorkerCapacity w2 = Worker("w-2", 4);
  w2.allocated["cpu"] = {3};  // 3 free: job-1 holds these
  ScheduleResult r =
      Schedule({Job("job-1", 1, 4, "cpu", 0, 1), Job("job-2", 1, 1, "cpu", 0, 2)}, {w2, w1});
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job_id, "job-2");
  EXPECT_EQ(r.placed[0].assignments[0].worker_id(), "w-1");
  EXPECT_NE(r.pending["job-1"].find("held for it until the rest free up: w-2: 3 cpu"),
            std::string::npos)
      << r.pending["job-1"];
}

TEST(SchedulerTest, AtEqualPriorityTheSubmitterHoldingFewerDevicesGoesFirst) {
  SchedulePolicy policy;
  policy.running_devices["hog"] = 6;
  policy.running_devices["bob"] = 1;
  PendingJob hog = Job("hog-1", 1, 1, "cpu", 0, 1);  // oldest, but its submitter holds most
  hog.owner = "hog";
  PendingJob bob = Job("bob-1", 1, 1, "cpu", 0, 2);
  bob.owner = "bob";
  PendingJob carol = Job("carol-1", 1, 1, "cpu", 0, 3);  // holds nothing: first
  carol.owner = "carol";
  PendingJob urgent = Job("hog-urgent", 1, 1, "cpu", 5, 4);  // priority still comes first
  urgent.owner = "hog";
  ScheduleResult r = Schedule({hog, bob, carol, urgent}, {Worker("w-1", 3)}, policy);
  ASSERT_EQ(r.placed.size(), 3u);
  EXPECT_EQ(r.placed[0].job_id, "hog-urgent");
  EXPECT_EQ(r.placed[1].job_id, "carol-1");
  EXPECT_EQ(r.placed[2].job_id, "bob-1");
  EXPECT_EQ(r.pending.count("hog-1"), 1u);
  // Without running jobs it is plain FIFO.
  r = Schedule({hog, bob, carol}, {Worker("w-1", 1)});
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job_id, "hog-1");
}

TEST(SchedulerTest, AmongEqualHoldersTheOneThatUsedLessGoesFirst) {
  // Neither runs anything now; the hog's older job still waits behind the
  // submitter that used fewer device-seconds lately.
  SchedulePolicy policy;
  policy.usage["hog"] = 600;
  policy.usage["bob"] = 30;
  PendingJob hog = Job("hog-1", 1, 1, "cpu", 0, 1);
  hog.owner = "hog";
  PendingJob bob = Job("bob-1", 1, 1, "cpu", 0, 2);
  bob.owner = "bob";
  ScheduleResult r = Schedule({hog, bob}, {Worker("w-1", 1)}, policy);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job_id, "bob-1");
  policy.running_devices["bob"] = 1;  // holding a device now outweighs usage
  r = Schedule({hog, bob}, {Worker("w-1", 1)}, policy);
  EXPECT_EQ(r.placed[0].job_id, "hog-1");
}

TEST(SchedulerTest, ASubmittersDeviceCapHoldsBackOnlyItsOwnJobs) {
  SchedulePolicy policy;
  policy.max_running_devices_per_submitter = 2;
  policy.running_devices["alice"] = 1;
  PendingJob big = Job("alice-big", 1, 2, "cpu", 5, 1);  // 1 + 2 > 2: waits
  big.owner = "alice";
  PendingJob bob = Job("bob", 1, 1, "cpu", 0, 2);
  bob.owner = "bob";
  PendingJob small = Job("alice-small", 1, 1, "cpu", 0, 3);  // 1 + 1: may start
  small.owner = "alice";
  PendingJob third = Job("alice-third", 1, 1, "cpu", 0, 4);  // 2 + 1 > 2 after alice-small
  third.owner = "alice";
  ScheduleResult r = Schedule({big, bob, small, third}, {Worker("w-1", 8)}, policy);
  ASSERT_EQ(r.placed.size(), 2u);
  EXPECT_EQ(r.placed[0].job_id, "bob");
  EXPECT_EQ(r.placed[1].job_id, "alice-small");
  EXPECT_EQ(r.pending["alice-big"],
            "needs 1 worker with 2 cpu devices; held back: submitter 'alice' runs 1 device, and 2 "
            "more would pass max_running_devices_per_submitter (2)");
  EXPECT_NE(r.pending["alice-third"].find("runs 2 devices"), std::string::npos);
  // Without the cap everything fits.
  EXPECT_EQ(Schedule({big, bob, small, third}, {Worker("w-1", 8)}).placed.size(), 4u);
}

TEST(SchedulerTest, OtherKindsAndOversizedJobsDoNotBlock) {
  WorkerCapacity w = Worker("w-1", 1, 2);
  w.allocated["cuda"] = {0};
  ScheduleResult r = Schedule({Job("big-gpu", 1, 2, "cuda", 0, 1),   // blocked: 1 cuda busy
                               Job("huge", 3, 1, "cpu", 0, 2),       // more workers than exist
                               Job("small-cpu", 1, 1, "cpu", 0, 3),  // may start
                               Job("small-gpu", 1, 1, "cuda", 0, 4)},
                              {w});
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job_id, "small-cpu");
  EXPECT_EQ(r.pending.count("big-gpu"), 1u);
  EXPECT_EQ(r.pending.count("huge"), 1u);
  EXPECT_NE(r.pending["small-gpu"].find("1 more are held for big-gpu"), std::string::npos)
      << r.pending["small-gpu"];
}

TEST(SchedulerTest, BestFitKeepsTheBigWorkerFree) {
  ScheduleResult r = Schedule({Job("small", 1, 1, "cpu", 0, 1), Job("big", 1, 4, "cpu", 0, 2)},
                              {Worker("w-1", 4), Worker("w-2", 1)});
  ASSERT_EQ(r.placed.size(), 2u);
  EXPECT_EQ(r.placed[0].assignments[0].worker_id(), "w-2");
  EXPECT_EQ(r.placed[1].assignments[0].worker_id(), "w-1");
}

TEST(SchedulerTest, CouldEverFit) {
  GangShape two_gpus;
  two_gpus.kind = "cuda";
  two_gpus.devices_per_worker = 2;
  EXPECT_EQ(CouldEverFit(two_gpus, {}), "");  // no fleet yet: accept
  WorkerCapacity busy = Worker("w-2", 0, 2);
  busy.allocated["cuda"] = {0, 1};  // busy devices still count
  EXPECT_EQ(CouldEverFit(two_gpus, {Worker("w-1", 8), busy}), "");
  EXPECT_EQ(CouldEverFit(two_gpus, {Worker("w-1", 8), Worker("w-3", 0, 1)}),
            "needs 1 worker with 2 cuda devices; registered: 1 worker (w-3: 1 cuda)");
  GangShape three;
  three.workers = 3;
  EXPECT_EQ(CouldEverFit(three, {Worker("w-1", 8)}),
            "needs 3 workers with 1 cpu device each; registered: 1 worker (w-1: 8 cpu)");
}

}  // namespace
}  // namespace yoke::server
