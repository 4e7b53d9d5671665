// The fixture the Coordinator's API tests share (coordinator_test.cc,
// coordinator_jobs_test.cc, coordinator_workers_test.cc,
// coordinator_lifecycle_test.cc): a Coordinator over an in-memory store with
// a fake clock and its own metrics, restartable over the same store, and
// helpers that build specs, registrations and attempt statuses. Test files
// put their tests in namespace yoke::server::coordinator_testing.
#ifndef YOKE_COORDINATOR_TESTING_COORDINATOR_FIXTURE_H_
#define YOKE_COORDINATOR_TESTING_COORDINATOR_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/fake_clock.h"
#include "config/config.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_store.h"
#include "gtest/gtest.h"

namespace yoke::server::coordinator_testing {

// A small synthetic-data job: 1 worker with 1 cpu device unless overridden.
inline constexpr char kSpec[] = R"(
name: t
model: {zoo: mlp, hidden: [8]}
data:
  train: {format: synthetic, shape: [4, 4, 1], num_classes: 2, num_examples: 64}
training:
  epochs: 1
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
)";

// kSpec with `overrides` (key=value) applied; fails the test if they do not load.
inline v1::JobSpec Spec(const std::vector<std::string>& overrides = {}) {
  auto s = common::LoadJobSpecString(kSpec, overrides);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// A registration from "host" with cpu devices 0..cpus-1; `id` "" asks for a new id.
inline v1::RegisterWorkerRequest Reg(int cpus, const std::string& id = "") {
  v1::RegisterWorkerRequest r;
  r.set_hostname("host");
  r.set_worker_id(id);
  for (int i = 0; i < cpus; ++i) {
    v1::Device* d = r.add_devices();
    d->set_kind("cpu");
    d->set_index(i);
  }
  return r;
}

// What a worker reports of one attempt of `job`.
inline v1::AttemptStatus Status(const std::string& job, int attempt,
                                v1::AttemptStatus::Phase phase) {
  v1::AttemptStatus s;
  s.set_job_id(job);
  s.set_attempt(attempt);
  s.set_phase(phase);
  return s;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  // A fresh coordinator over the same store: what a process restart does.
  void Restart() {
    coord_.reset();
    CoordinatorOptions o;
    o.data_roots = data_roots_;
    o.max_pending_jobs_per_submitter = max_pending_jobs_;
    o.max_pending_spec_bytes_per_submitter = max_pending_spec_bytes_;
    o.max_submits_per_minute_per_submitter = max_submits_per_minute_;
    o.max_running_devices_per_submitter = max_running_devices_;
    o.default_max_run_seconds = default_max_run_seconds_;
    o.metrics = &metrics_;
    auto c = Coordinator::Create(&store_, &clock_, o);
    ASSERT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
  }

  std::string Register(int cpus, const std::string& id = "") {
    auto r = coord_->RegisterWorker(Reg(cpus, id));
    EXPECT_TRUE(r.ok()) << r.status();
    return r->worker_id();
  }

  v1::HeartbeatResponse Beat(const std::string& worker, std::vector<v1::AttemptStatus> st = {}) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    for (auto& s : st) *req.add_attempts() = s;
    auto r = coord_->Heartbeat(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : v1::HeartbeatResponse();
  }

  v1::Job Job(const std::string& id) {
    auto j = coord_->Get(id);
    EXPECT_TRUE(j.ok()) << j.status();
    return *j;
  }

  common::FakeClock clock_;
  CoordinatorMetrics metrics_;
  InMemoryJobStore store_;
  std::vector<std::string> data_roots_;
  int64_t max_pending_jobs_ = 0;  // the quotas Restart() sets; 0: none
  int64_t max_pending_spec_bytes_ = 0;
  int64_t max_submits_per_minute_ = 0;
  int64_t max_running_devices_ = 0;
  int64_t default_max_run_seconds_ = 0;
  std::unique_ptr<Coordinator> coord_;
};

// Multi-worker attempts (issue 4): a gang over two 1-cpu workers.
class MultiWorkerTest : public CoordinatorTest {
 protected:
  // Two 1-cpu workers and a job over both, each share reported RUNNING.
  void StartTwoRanks(const std::vector<std::string>& overrides = {}) {
    w1_ = Register(1);
    w2_ = Register(1);
    std::vector<std::string> o = {"distribution.workers=2"};
    o.insert(o.end(), overrides.begin(), overrides.end());
    auto id = coord_->Submit(Spec(o), 0);
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
    Beat(w1_, {Status(id_, 1, v1::AttemptStatus::RUNNING)});
    Beat(w2_, {Status(id_, 1, v1::AttemptStatus::RUNNING)});
    ASSERT_EQ(Job(id_).state(), v1::JOB_RUNNING);
  }

  v1::AttemptStatus Exit(int attempt, int code, const std::string& reason) {
    v1::AttemptStatus st = Status(id_, attempt, v1::AttemptStatus::EXITED);
    st.set_exit_code(code);
    st.set_reason(reason);
    return st;
  }

  v1::AttemptStatus Progress(int attempt, int64_t step, int64_t completed) {
    v1::AttemptStatus st = Status(id_, attempt, v1::AttemptStatus::RUNNING);
    st.mutable_progress()->set_step(step);
    st.mutable_progress()->set_collective_seq_issued(completed + 1);
    st.mutable_progress()->set_collective_seq_completed(completed);
    return st;
  }

  std::string w1_, w2_, id_;
};

}  // namespace yoke::server::coordinator_testing

#endif  // YOKE_COORDINATOR_TESTING_COORDINATOR_FIXTURE_H_
