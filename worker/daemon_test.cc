// WorkerDaemon's register / heartbeat / reconcile logic against an in-memory
// coordinator, with real child processes (worker/testing/daemon_fixture.h).
#include "worker/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "worker/testing/daemon_fixture.h"

namespace yoke::worker::daemon_testing {
namespace {

TEST_F(DaemonTest, RegistersWithItsDevicesThenHeartbeats) {
  auto d = NewDaemon();
  std::string seen_id;
  bool seen_first = false;
  d->on_registered = [&](const std::string& id, bool first) { seen_id = id, seen_first = first; };
  EXPECT_EQ(d->worker_id(), "");
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(d->worker_id(), "w-1");
  EXPECT_EQ(seen_id, "w-1");
  EXPECT_TRUE(seen_first);
  ASSERT_EQ(fake_.registers.size(), 1u);
  EXPECT_EQ(fake_.registers[0].hostname(), "test-host");
  EXPECT_EQ(fake_.registers[0].worker_id(), "");
  ASSERT_EQ(fake_.registers[0].devices_size(), 1);
  EXPECT_EQ(fake_.registers[0].devices(0).kind(), "cpu");
  // The first heartbeat follows the registration at once.
  ASSERT_EQ(fake_.heartbeats.size(), 1u);
  EXPECT_EQ(fake_.heartbeats[0].worker_id(), "w-1");
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(fake_.registers.size(), 1u);
  EXPECT_EQ(fake_.heartbeats.size(), 2u);
}

TEST_F(DaemonTest, RunsADesiredAttemptAndReportsEachEpochAndLineOnce) {
  v1::DesiredAttempt want = Desired("job-1", 1, "quick");
  fake_.desired = {want};
  auto d = NewDaemon();
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-1/1"); }));
  v1::AttemptStatus s = fake_.Last("job-1/1");
  EXPECT_EQ(s.exit_code(), 0) << s.reason();
  EXPECT_EQ(s.reason(), "");
  EXPECT_EQ(s.result().steps(), 10);
  EXPECT_DOUBLE_EQ(s.result().test_accuracy(), 0.75);
  EXPECT_GT(s.pid(), 0);
  ASSERT_EQ(fake_.epochs["job-1/1"].size(), 2u);
  EXPECT_EQ(fake_.epochs["job-1/1"][0].epoch(), 1);
  EXPECT_EQ(fake_.epochs["job-1/1"][1].epoch(), 2);
  const auto& logs = fake_.logs["job-1/1"];
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_EQ(logs[0].text(), "log 1");
  EXPECT_EQ(logs[0].seq(), 1);
  EXPECT_EQ(logs[1].text(), "log 2");
  EXPECT_EQ(logs[1].seq(), 2);
  EXPECT_EQ(logs[1].worker_id(), "w-1");
  EXPECT_EQ(logs[1].attempt(), 1);

  // The trainer ran once, in its attempt directory, with the spec the
  // coordinator sent and the event protocol.
  const std::string attempt_dir = options_.work_dir + "/job-1/attempt-1";
  auto spec = common::ReadJobSpecFile(attempt_dir + "/job.pb");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*spec, want.spec()));
  EXPECT_EQ(ReadFile(attempt_dir + "/runs.txt"),
            "--spec-file " + attempt_dir +
                "/job.pb --output events --rank 0 --world-size 1 --stop-grace 4s\n");
  EXPECT_EQ(ReadFile(attempt_dir + "/trainer.log"), "log 1\nlog 2\n");

  // Still listed after its exit: reported again, never restarted.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(fake_.LastHeartbeat().attempts_size(), 1);
  EXPECT_EQ(fake_.LastHeartbeat().attempts(0).phase(), v1::AttemptStatus::EXITED);
  EXPECT_EQ(fake_.logs["job-1/1"].size(), 2u);
  EXPECT_EQ(ReadFile(attempt_dir + "/runs.txt"),
            "--spec-file " + attempt_dir +
                "/job.pb --output events --rank 0 --world-size 1 --stop-grace 4s\n");

  // Once the coordinator stops listing it, it is forgotten.
  fake_.desired.clear();
  ASSERT_TRUE(d->Tick().ok());
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(fake_.LastHeartbeat().attempts_size(), 0);
}

TEST_F(DaemonTest, ResendsWhatAFailedHeartbeatCarried) {
  options_.max_log_lines_per_heartbeat = 7;
  fake_.desired = {Desired("job-2", 1, "chatty")};
  fake_.fail_every_other = true;
  auto d = NewDaemon();
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-2/1"); }));
  // Every line arrived exactly once, in order, though half the heartbeats
  // failed and each carried at most 7 lines.
  const auto& logs = fake_.logs["job-2/1"];
  ASSERT_EQ(logs.size(), 30u);
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(logs[i].seq(), i + 1);
    EXPECT_EQ(logs[i].text(), "line " + std::to_string(i + 1));
  }
  for (const auto& hb : fake_.heartbeats) {
    for (const auto& a : hb.attempts()) EXPECT_LE(a.logs_size(), 7);
  }
}

TEST_F(DaemonTest, LimitsLogBytesPerHeartbeat) {
  options_.max_log_bytes_per_heartbeat = 20;  // "line N" is 6-7 bytes: 2 lines fit
  fake_.desired = {Desired("job-12", 1, "chatty")};
  auto d = NewDaemon();
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-12/1"); }));
  EXPECT_EQ(fake_.logs["job-12/1"].size(), 30u);
  for (const auto& hb : fake_.heartbeats) {
    size_t bytes = 0;
    for (const auto& a : hb.attempts()) {
      for (const auto& l : a.logs()) bytes += l.text().size();
    }
    EXPECT_LE(bytes, 20u);
  }
  // 30 lines at 2 per heartbeat: at least 15 heartbeats carried them.
  EXPECT_GE(fake_.heartbeats.size(), 15u);
}

TEST_F(DaemonTest, StopsAttemptsNoLongerDesired) {
  fake_.desired = {Desired("job-3", 1, "long")};
  auto d = NewDaemon();
  ASSERT_TRUE(
      TickUntil(*d, [&] { return fake_.Last("job-3/1").phase() == v1::AttemptStatus::RUNNING; }));
  const pid_t pid = fake_.Last("job-3/1").pid();
  fake_.desired.clear();  // cancelled
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-3/1"); }));
  v1::AttemptStatus s = fake_.Last("job-3/1");
  EXPECT_EQ(s.exit_code(), 143);  // its own SIGTERM handler's exit
  EXPECT_NE(s.reason().find("no longer desired"), std::string::npos) << s.reason();
  EXPECT_EQ(s.result().steps(), 0);  // no result for a non-zero exit
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(fake_.logs["job-3/1"].back().text(), "stopping");
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(fake_.LastHeartbeat().attempts_size(), 0);
}

TEST_F(DaemonTest, ReRegistersAfterNotFoundWhileTrainersKeepRunning) {
  fake_.desired = {Desired("job-4", 1, "long")};
  auto d = NewDaemon();
  ASSERT_TRUE(
      TickUntil(*d, [&] { return fake_.Last("job-4/1").phase() == v1::AttemptStatus::RUNNING; }));
  const pid_t pid = fake_.Last("job-4/1").pid();
  {
    absl::MutexLock l(&fake_.mu);
    fake_.known = false;  // the coordinator restarted without this worker
  }
  ASSERT_TRUE(d->Tick().ok());
  ASSERT_EQ(fake_.registers.size(), 2u);
  const v1::RegisterWorkerRequest& again = fake_.registers[1];
  EXPECT_EQ(again.worker_id(), "w-1");
  ASSERT_EQ(again.attempts_size(), 1);
  EXPECT_EQ(again.attempts(0).job_id(), "job-4");
  EXPECT_EQ(again.attempts(0).phase(), v1::AttemptStatus::RUNNING);
  EXPECT_EQ(again.attempts(0).pid(), pid);
  EXPECT_EQ(kill(pid, 0), 0);  // untouched
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(fake_.Last("job-4/1").phase(), v1::AttemptStatus::RUNNING);
  EXPECT_EQ(fake_.Last("job-4/1").pid(), pid);
}

// A coordinator that no longer accepts the daemon's id (its store was
// replaced) refuses the token: the daemon stops the trainers it ran under
// that id and registers as a new worker.
TEST_F(DaemonTest, RefusedIncarnationStartsOverAsANewWorker) {
  fake_.desired = {Desired("job-6", 1, "long")};
  auto d = NewDaemon();
  ASSERT_TRUE(
      TickUntil(*d, [&] { return fake_.Last("job-6/1").phase() == v1::AttemptStatus::RUNNING; }));
  const pid_t pid = fake_.Last("job-6/1").pid();
  {
    absl::MutexLock l(&fake_.mu);
    fake_.known = false;
    fake_.token_prefix = "new-store-token-of-";
    fake_.desired.clear();
  }
  EXPECT_EQ(d->Tick().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(TickUntil(*d, [&] { return d->worker_id() == "w-2"; }));
  ASSERT_GE(fake_.registers.size(), 3u);
  EXPECT_EQ(fake_.registers[1].worker_id(), "w-1");
  EXPECT_EQ(fake_.registers[1].incarnation(), "token-of-w-1");
  EXPECT_EQ(fake_.registers[2].worker_id(), "");
  EXPECT_EQ(fake_.registers[2].incarnation(), "");
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-6/1"); }));
  EXPECT_NE(fake_.Last("job-6/1").reason().find("no longer accepts worker id w-1"),
            std::string::npos)
      << fake_.Last("job-6/1").reason();
  EXPECT_EQ(kill(pid, 0), -1);
}

TEST_F(DaemonTest, KeepsTrainingWhileTheCoordinatorIsUnreachable) {
  fake_.desired = {Desired("job-5", 1, "quick")};
  auto d = NewDaemon();
  ASSERT_TRUE(d->Tick().ok());  // registered and started the attempt
  {
    absl::MutexLock l(&fake_.mu);
    fake_.unreachable = true;
  }
  // The trainer finishes on its own while every heartbeat fails.
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  bool exited = false;
  while (!exited && absl::Now() < deadline) {
    absl::Status s = d->Tick();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
    auto obs = d->ObservedAttempts();
    exited = obs.size() == 1 && obs[0].phase() == v1::AttemptStatus::EXITED;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(exited);
  EXPECT_TRUE(fake_.logs["job-5/1"].empty());
  {
    absl::MutexLock l(&fake_.mu);
    fake_.unreachable = false;
  }
  // Back: the first heartbeat delivers everything that was held back.
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_TRUE(Exited("job-5/1"));
  EXPECT_EQ(fake_.Last("job-5/1").exit_code(), 0);
  EXPECT_EQ(fake_.logs["job-5/1"].size(), 2u);
  EXPECT_EQ(fake_.epochs["job-5/1"].size(), 2u);
}

// The coordinator restarts while it is down, and the trainer finishes in
// between: the re-registration must carry the exit (and the output held
// back), or the coordinator would take the attempt for a lost trainer.
TEST_F(DaemonTest, AttemptThatExitedDuringAnOutageIsListedWhenRegisteringAgain) {
  fake_.desired = {Desired("job-11", 1, "quick")};
  auto d = NewDaemon();
  ASSERT_TRUE(d->Tick().ok());
  {
    absl::MutexLock l(&fake_.mu);
    fake_.unreachable = true;
  }
  ASSERT_TRUE(TickUntil(*d, [&] {
    auto obs = d->ObservedAttempts();
    return obs.size() == 1 && obs[0].phase() == v1::AttemptStatus::EXITED;
  }));
  {
    absl::MutexLock l(&fake_.mu);
    fake_.unreachable = false;
    fake_.known = false;  // restarted: the next heartbeat gets NOT_FOUND
  }
  ASSERT_TRUE(d->Tick().ok());
  ASSERT_EQ(fake_.registers.size(), 2u);
  const v1::RegisterWorkerRequest& again = fake_.registers[1];
  ASSERT_EQ(again.attempts_size(), 1);
  EXPECT_EQ(again.attempts(0).phase(), v1::AttemptStatus::EXITED);
  EXPECT_EQ(again.attempts(0).exit_code(), 0);
  EXPECT_EQ(again.attempts(0).result().steps(), 10);
  // Its output was delivered by the registration, and only there.
  ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(fake_.logs["job-11/1"].size(), 2u);
  EXPECT_EQ(fake_.epochs["job-11/1"].size(), 2u);
  EXPECT_EQ(fake_.LastHeartbeat().attempts(0).logs_size(), 0);
}

TEST_F(DaemonTest, FailedTrainerReportsItsError) {
  fake_.desired = {Desired("job-6", 1, "fail")};
  auto d = NewDaemon();
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-6/1"); }));
  EXPECT_EQ(fake_.Last("job-6/1").exit_code(), 2);
  EXPECT_EQ(fake_.Last("job-6/1").reason(), "data.train.images: cannot open /nowhere");
}

TEST_F(DaemonTest, BadDesiredAttemptsAreReportedAsExitsNotCrashes) {
  fake_.desired = {Desired("../escape", 1, "quick"), Desired("job-7", 0, "quick")};
  auto d = NewDaemon();
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("../escape/1") && Exited("job-7/0"); }));
  EXPECT_EQ(fake_.Last("../escape/1").exit_code(), 127);
  EXPECT_NE(fake_.Last("../escape/1").reason().find("job_id"), std::string::npos);
  EXPECT_NE(fake_.Last("job-7/0").reason().find("attempt: must be >= 1"), std::string::npos);
  EXPECT_NE(access((dir_ + "/escape").c_str(), F_OK), 0);

  options_.trainer_path = dir_ + "/no-such-trainer";
  fake_.desired = {Desired("job-8", 1, "quick")};
  auto d2 = NewDaemon();
  ASSERT_TRUE(TickUntil(*d2, [&] { return Exited("job-8/1"); }));
  EXPECT_EQ(fake_.Last("job-8/1").exit_code(), 127);
  EXPECT_NE(fake_.Last("job-8/1").reason().find("cannot run"), std::string::npos)
      << fake_.Last("job-8/1").reason();
}

// Replies after the first carry no spec for an attempt the worker reports:
// it keeps running the trainer it started, once.
TEST_F(DaemonTest, KeepsRunningAnAttemptWhoseLaterRepliesOmitTheSpec) {
  fake_.desired = {Desired("job-13", 1, "long")};
  auto d = NewDaemon();
  ASSERT_TRUE(
      TickUntil(*d, [&] { return fake_.Last("job-13/1").phase() == v1::AttemptStatus::RUNNING; }));
  const pid_t pid = fake_.Last("job-13/1").pid();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(d->Tick().ok());
  EXPECT_EQ(fake_.Last("job-13/1").phase(), v1::AttemptStatus::RUNNING);
  EXPECT_EQ(fake_.Last("job-13/1").pid(), pid);
  EXPECT_EQ(kill(pid, 0), 0);
  const std::string attempt_dir = options_.work_dir + "/job-13/attempt-1";
  std::string runs = ReadFile(attempt_dir + "/runs.txt");
  EXPECT_EQ(std::count(runs.begin(), runs.end(), '\n'), 1) << runs;
}

// An attempt listed without its spec that this worker does not run cannot
// be started: it is reported as a start failure, and the daemon goes on.
TEST_F(DaemonTest, UnknownAttemptWithoutItsSpecIsReportedNotStarted) {
  v1::DesiredAttempt bare = Desired("job-14", 1, "quick");
  bare.clear_spec();
  fake_.desired = {bare, Desired("job-15", 1, "quick")};
  auto d = NewDaemon();
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-14/1") && Exited("job-15/1"); }));
  EXPECT_EQ(fake_.Last("job-14/1").exit_code(), 127);
  EXPECT_NE(fake_.Last("job-14/1").reason().find("without its spec"), std::string::npos)
      << fake_.Last("job-14/1").reason();
  EXPECT_NE(access((options_.work_dir + "/job-14/attempt-1/runs.txt").c_str(), F_OK), 0);
  EXPECT_EQ(fake_.Last("job-15/1").exit_code(), 0) << fake_.Last("job-15/1").reason();
}

// A share restarted alone: once the coordinator lists a higher incarnation
// of an attempt whose trainer exited, the daemon starts that trainer again,
// once, as the incarnation, in a directory of its own; until then an exited
// attempt stays exited.
TEST_F(DaemonTest, StartsAnExitedAttemptAgainAsTheIncarnationTheCoordinatorLists) {
  fake_.desired = {Desired("job-16", 1, "fail")};
  auto d = NewDaemon();
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-16/1"); }));
  EXPECT_EQ(fake_.Last("job-16/1").incarnation(), 0);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(d->Tick().ok());
  const std::string attempt_dir = options_.work_dir + "/job-16/attempt-1";
  std::string runs = ReadFile(attempt_dir + "/runs.txt");
  EXPECT_EQ(std::count(runs.begin(), runs.end(), '\n'), 1) << "no restart unasked: " << runs;

  {
    absl::MutexLock l(&fake_.mu);
    fake_.desired[0].set_incarnation(1);
  }
  ASSERT_TRUE(TickUntil(*d, [&] {
    v1::AttemptStatus st = fake_.Last("job-16/1");
    return st.incarnation() == 1 && st.phase() == v1::AttemptStatus::EXITED;
  }));
  EXPECT_EQ(fake_.Last("job-16/1").exit_code(), 2);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(d->Tick().ok());
  const std::string again = attempt_dir + "/incarnation-1";
  EXPECT_EQ(ReadFile(again + "/runs.txt"),
            "--spec-file " + again +
                "/job.pb --output events --rank 0 --world-size 1 --stop-grace 4s "
                "--ps-incarnation 1\n");
  EXPECT_EQ(ReadFile(attempt_dir + "/runs.txt"), runs) << "the first incarnation ran once";
}

TEST_F(DaemonTest, PassesRanksAndResumeCheckpoint) {
  v1::DesiredAttempt want = Desired("job-9", 2, "quick");
  want.set_resume(true);
  want.mutable_spec()->mutable_checkpoint()->set_dir("/ckpt/job-9");
  want.set_spec_digest(common::JobSpecDigest(want.spec()));
  fake_.desired = {want};
  auto d = NewDaemon();
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-9/2"); }));
  const std::string attempt_dir = options_.work_dir + "/job-9/attempt-2";
  EXPECT_EQ(ReadFile(attempt_dir + "/runs.txt"),
            "--spec-file " + attempt_dir +
                "/job.pb --output events --rank 0 --world-size 1 --stop-grace 4s --resume-latest "
                "/ckpt/job-9\n");
}

TEST_F(DaemonTest, PassesTheRendezvousToARankOfAMultiWorkerAttempt) {
  v1::DesiredAttempt want = Desired("job-11", 3, "quick");
  want.set_world_size(4);
  want.set_first_rank(2);
  want.set_num_replicas(2);
  for (const char* w : {"w-9", "w-9", "w-1", "w-1"}) want.add_rank_workers(w);
  for (const char* a : {"10.0.0.9", "10.0.0.9", "10.0.0.1", "10.0.0.1"}) want.add_rank_addresses(a);
  fake_.desired = {want};
  options_.advertise_address = "10.0.0.1";
  auto d = NewDaemon();
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-11/3"); }));
  // The worker registered the address its trainers listen on.
  {
    absl::MutexLock l(&fake_.mu);
    ASSERT_FALSE(fake_.registers.empty());
    EXPECT_EQ(fake_.registers.back().address(), "10.0.0.1");
  }
  const std::string attempt_dir = options_.work_dir + "/job-11/attempt-3";
  // Gloo binds to the advertised address; the trainer learns who runs each
  // rank for its messages.
  EXPECT_EQ(ReadFile(attempt_dir + "/runs.txt"),
            "--spec-file " + attempt_dir +
                "/job.pb --output events --rank 2 --world-size 4 --stop-grace 4s --replicas 2 "
                "--coordinator fake --job-id job-11 --attempt 3 --gloo-hostname 10.0.0.1 "
                "--rank-hosts w-9@10.0.0.9,w-9@10.0.0.9,w-1@10.0.0.1,w-1@10.0.0.1\n");

  // Ranks past the end of the world are refused, not started.
  v1::DesiredAttempt bad = Desired("job-12", 1, "quick");
  bad.set_world_size(2);
  bad.set_first_rank(1);
  bad.set_num_replicas(2);
  fake_.desired = {bad};
  ASSERT_TRUE(TickUntil(*d, [&] { return Exited("job-12/1"); }));
  EXPECT_EQ(fake_.Last("job-12/1").exit_code(), 127);
  EXPECT_NE(fake_.Last("job-12/1").reason().find("num_replicas"), std::string::npos)
      << fake_.Last("job-12/1").reason();
}

TEST_F(DaemonTest, ShutdownStopsTrainersAndReportsTheirExit) {
  fake_.interval_ms = 50;
  fake_.desired = {Desired("job-10", 1, "long")};
  auto d = NewDaemon();
  absl::Status run_status = absl::UnknownError("not returned");
  std::thread t([&] { run_status = d->Run(); });
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (fake_.Last("job-10/1").phase() != v1::AttemptStatus::RUNNING && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(fake_.Last("job-10/1").phase(), v1::AttemptStatus::RUNNING);
  const pid_t pid = fake_.Last("job-10/1").pid();
  absl::Time t0 = absl::Now();
  d->Shutdown();
  t.join();
  EXPECT_TRUE(run_status.ok()) << run_status;
  EXPECT_LT(absl::Now() - t0, options_.stop_grace);
  EXPECT_EQ(kill(pid, 0), -1);
  // The last heartbeat told the coordinator how the attempt ended.
  v1::HeartbeatRequest last = fake_.LastHeartbeat();
  ASSERT_EQ(last.attempts_size(), 1);
  EXPECT_EQ(last.attempts(0).phase(), v1::AttemptStatus::EXITED);
  EXPECT_EQ(last.attempts(0).exit_code(), 143);
  EXPECT_NE(last.attempts(0).reason().find("worker shutting down"), std::string::npos)
      << last.attempts(0).reason();
  EXPECT_TRUE(last.draining());
  absl::MutexLock l(&fake_.mu);
  EXPECT_FALSE(fake_.heartbeats.front().draining());
}

}  // namespace
}  // namespace yoke::worker::daemon_testing
