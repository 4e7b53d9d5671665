// The fixture WorkerDaemon's tests share (worker/daemon_test.cc): an
// in-memory coordinator (FakeCoordinator), and a small shell script that
// stands in for yoke-trainer as a real child process and acts as the job's
// name says. Test files put their tests in namespace
// yoke::worker::daemon_testing.
#ifndef YOKE_WORKER_TESTING_DAEMON_FIXTURE_H_
#define YOKE_WORKER_TESTING_DAEMON_FIXTURE_H_

#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "jobspec/job_spec_binary.h"
#include "worker/daemon.h"

namespace yoke::worker::daemon_testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Speaks the trainer's event protocol. Every run appends its arguments to
// runs.txt in its working directory (the attempt's directory). It is run as
// `--spec-file job.pb ...` and acts as the job's name (a string in the
// binary spec) says.
inline constexpr char kFakeTrainer[] = R"SH(#!/bin/sh
echo "$@" >> runs.txt
case "$(tr -cd 'a-z' < "$2")" in
  *quick*)
    echo '{"info": "model: fake"}'
    echo 'log 1' >&2
    echo '{"step": {"step": "5", "total_steps": "10"}}'
    echo '{"epoch": {"epoch": 1, "test_accuracy": 0.5}}'
    echo 'log 2' >&2
    echo '{"epoch": {"epoch": 2, "test_accuracy": 0.75}}'
    echo '{"result": {"steps": 10, "epochs": 2, "test_accuracy": 0.75}}'
    exit 0 ;;
  *chatty*)
    i=1; while [ $i -le 30 ]; do echo "line $i" >&2; i=$((i+1)); done
    exit 0 ;;
  *long*)
    trap 'echo stopping >&2; exit 143' TERM
    echo '{"info": "started"}'
    while :; do sleep 0.05; done ;;
  *fail*)
    echo '{"error": "data.train.images: cannot open /nowhere"}'
    exit 2 ;;
esac
exit 99
)SH";

// An in-memory WorkerControl. It records every request, answers heartbeats
// with `desired`, and keeps what successful heartbeats delivered per
// attempt ("job/attempt"), the way the coordinator would store it. Like the
// coordinator, it leaves out the spec of an attempt the heartbeat lists.
class FakeCoordinator final : public CoordinatorClient {
 public:
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request) override {
    absl::MutexLock l(&mu);
    if (unreachable) return absl::UnavailableError("connection refused");
    registers.push_back(request);
    // Like the coordinator: an id must come with the token it was given.
    if (!request.worker_id().empty() &&
        request.incarnation() != token_prefix + request.worker_id()) {
      return absl::FailedPreconditionError("worker id does not match its incarnation token");
    }
    known = true;
    for (const v1::AttemptStatus& a : request.attempts()) Apply(a);
    v1::RegisterWorkerResponse r;
    r.set_worker_id(request.worker_id().empty() ? absl::StrCat("w-", ++issued)
                                                : request.worker_id());
    r.set_incarnation(token_prefix + r.worker_id());
    r.set_heartbeat_interval_ms(interval_ms);
    return r;
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request) override {
    absl::MutexLock l(&mu);
    heartbeats.push_back(request);
    if (unreachable) return absl::UnavailableError("connection refused");
    if (fail_every_other && heartbeats.size() % 2 == 0) {
      return absl::DeadlineExceededError("deadline exceeded");
    }
    if (!known) return absl::NotFoundError("unknown worker " + request.worker_id());
    for (const v1::AttemptStatus& a : request.attempts()) Apply(a);
    v1::HeartbeatResponse r;
    for (const v1::DesiredAttempt& d : desired) {
      v1::DesiredAttempt* out = r.add_desired();
      *out = d;
      for (const v1::AttemptStatus& a : request.attempts()) {
        if (a.job_id() == d.job_id() && a.attempt() == d.attempt()) out->clear_spec();
      }
    }
    return r;
  }

  void Apply(const v1::AttemptStatus& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::string key = a.job_id() + "/" + std::to_string(a.attempt());
    for (const v1::LogLine& line : a.logs()) logs[key].push_back(line);
    for (const v1::EpochResult& e : a.epochs()) epochs[key].push_back(e);
    last[key] = a;
  }

  // Accessors that copy under the lock.
  v1::AttemptStatus Last(const std::string& key) {
    absl::MutexLock l(&mu);
    return last.count(key) ? last[key] : v1::AttemptStatus();
  }
  v1::HeartbeatRequest LastHeartbeat() {
    absl::MutexLock l(&mu);
    return heartbeats.empty() ? v1::HeartbeatRequest() : heartbeats.back();
  }

  absl::Mutex mu;
  std::vector<v1::DesiredAttempt> desired;
  bool unreachable = false;
  bool fail_every_other = false;
  bool known = false;  // false: heartbeats get NOT_FOUND (a restarted coordinator)
  int issued = 0;      // new ids handed out
  std::string token_prefix = "token-of-";  // changed: a coordinator with a new store
  int64_t interval_ms = 1000;
  std::vector<v1::RegisterWorkerRequest> registers;
  std::vector<v1::HeartbeatRequest> heartbeats;
  std::map<std::string, std::vector<v1::LogLine>> logs;
  std::map<std::string, std::vector<v1::EpochResult>> epochs;
  std::map<std::string, v1::AttemptStatus> last;
};

inline v1::DesiredAttempt Desired(const std::string& job, int attempt, const std::string& name) {
  v1::DesiredAttempt d;
  d.set_job_id(job);
  d.set_attempt(attempt);
  d.mutable_spec()->set_name(name);
  d.mutable_spec()->mutable_training()->set_epochs(2);
  d.set_spec_digest(common::JobSpecDigest(d.spec()));
  d.set_world_size(1);
  d.set_num_replicas(1);
  d.add_devices(0);
  return d;
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    trainer_ = dir_ + "/fake-trainer.sh";
    std::ofstream(trainer_) << kFakeTrainer;
    chmod(trainer_.c_str(), 0755);
    options_.hostname = "test-host";
    v1::Device cpu;
    cpu.set_kind("cpu");
    cpu.set_name("cpu replica");
    options_.devices = {cpu};
    options_.coordinator_address = "fake";
    options_.work_dir = dir_ + "/work";
    options_.trainer_path = trainer_;
    options_.stop_grace = absl::Seconds(5);  // trainers get --stop-grace 4s
  }

  std::unique_ptr<WorkerDaemon> NewDaemon() {
    return std::make_unique<WorkerDaemon>(options_, &fake_);
  }

  // Ticks every 20 ms until `cond` holds (true) or `timeout` passes (false).
  bool TickUntil(WorkerDaemon& d, const std::function<bool()>& cond,
                 absl::Duration timeout = absl::Seconds(10)) {
    absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      (void)d.Tick();
      if (cond()) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  bool Exited(const std::string& key) {
    return fake_.Last(key).phase() == v1::AttemptStatus::EXITED;
  }

  common::TempDir tmp_{"yoke_daemon"};  // removed with its files after each test
  std::string dir_, trainer_;
  WorkerDaemonOptions options_;
  FakeCoordinator fake_;
};

}  // namespace yoke::worker::daemon_testing

#endif  // YOKE_WORKER_TESTING_DAEMON_FIXTURE_H_
