// Workers that come and go: a worker process killed with SIGKILL under async
// and bounded, the others training on while it is gone, and its next
// incarnation (a new process) rejoining at the step its PS tasks name; under
// sync the same kill fails the PS tasks, naming the worker. Worker 1 is
// ps_test_worker (ps/runtime/testing/worker_main.cc), worker 0 a thread
// here, the two PS tasks threads here, all linked through a FileStore.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collective/file_store.h"
#include "common/testing/child_process.h"
#include "common/testing/temp_dir.h"
#include "engine/optim/schedule.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ps/runtime/links.h"
#include "ps/runtime/ps_client.h"
#include "ps/runtime/shard_server.h"
#include "ps/shard_map.h"

namespace yoke::ps {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kFloats = 20000;
constexpr int kPsTasks = 2;
constexpr int64_t kMinShardBytes = 16 << 10;  // two shards of 10,000 floats
constexpr float kLr = 1.0f / 1024;            // every value 1 - k lr is exact in float
constexpr int64_t kSamples = 4;               // ps_test_worker's too

std::string HelperPath() { return common::SiblingBinary("ps_test_worker"); }
using common::Spawn;
using common::WaitExit;

// ps_test_worker's report: clock, pushes, join clock, values[0] at the
// join, the next data step and the data step at the join.
struct Report {
  int64_t clock = -1, pushes = 0, join_clock = -1;
  double joined = 0;
  int64_t data_step = -1, join_step = -1;
};
Report ReadReport(const std::string& path) {
  Report r;
  std::ifstream in(path);
  in >> r.clock >> r.pushes >> r.join_clock >> r.joined >> r.data_step >> r.join_step;
  return r;
}

// Waits up to `seconds` for `done`; false if it never held.
template <typename F>
bool WaitFor(F done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

v1::OptimizerSpec PlainSgd() {
  v1::OptimizerSpec o;
  o.set_type("sgd");
  o.set_lr(kLr);
  return o;
}

struct Job {
  common::TempDir dir{"yoke_ps_rejoin"};
  std::unique_ptr<collective::FileStore> store;
  ShardMap map;
  std::vector<std::unique_ptr<ShardServer>> servers;
  std::vector<std::thread> threads;
  std::vector<absl::Status> served;

  int64_t start_step = 0;  // the attempt's first data step

  explicit Job(const ServerOptions& so) : start_step(so.start_step) {
    store = collective::FileStore::Open(dir.File("store")).value();
    map = BuildShardMap(kFloats, kPsTasks, kMinShardBytes).value();
    EXPECT_EQ(map.shards.size(), 2u);
    std::vector<float> initial(kFloats, 1.0f);
    served.resize(map.shards.size());
    for (const Shard& s : map.shards) {
      servers.push_back(
          ShardServer::Create(store.get(), 2, s, initial.data() + s.offset, PlainSgd(),
                              engine::CreateSchedule(v1::ScheduleSpec(), kLr, 1000).value(), so)
              .value());
    }
    for (size_t i = 0; i < servers.size(); ++i) {
      threads.emplace_back([this, i] { served[i] = servers[i]->Run(); });
    }
  }
  ~Job() {
    for (auto& t : threads) t.join();
  }

  std::vector<std::string> Worker1(int64_t incarnation, int64_t pushes,
                                   const std::string& report) const {
    return {HelperPath(),
            "--store_dir=" + dir.File("store"),
            "--worker=1",
            "--incarnation=" + std::to_string(incarnation),
            "--floats=" + std::to_string(kFloats),
            "--ps_tasks=" + std::to_string(kPsTasks),
            "--min_shard_bytes=" + std::to_string(kMinShardBytes),
            "--pushes=" + std::to_string(pushes),
            "--start_step=" + std::to_string(start_step),
            "--report=" + report};
  }
};

// Worker 0, on a thread of the test: steps until `stop` and leaves.
struct Worker0 {
  std::atomic<int64_t> clock{0};
  std::atomic<bool> stop{false};
  absl::Status status;
  std::thread thread;

  explicit Worker0(Job& job) {
    thread = std::thread([this, &job] {
      auto links = ConnectWorkerLinks(job.store.get(), 0, 0, job.map,
                                      [](int) { return collective::GlooOptions(); });
      if (!links.ok()) {
        status = links.status();
        return;
      }
      auto client = PsClient::Create(*links, 0, job.map, absl::Seconds(60)).value();
      status = client->StartAt(job.start_step);
      if (!status.ok()) return;
      std::vector<float> values(kFloats), grads(kFloats, static_cast<float>(kSamples));
      while (!stop.load()) {
        status = client->PushPull(grads.data(), values.data(), kSamples);
        if (!status.ok()) return;
        clock.store(client->clock());
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      status = client->Leave();
    });
  }
  ~Worker0() {
    if (thread.joinable()) thread.join();
  }
};

// Stops worker 0 and waits for it and the PS tasks, which must all have
// ended well.
void EndJob(Job& job, Worker0& w0) {
  w0.stop.store(true);
  w0.thread.join();
  ASSERT_TRUE(w0.status.ok()) << w0.status;
  for (auto& t : job.threads) t.join();
  job.threads.clear();
  for (const absl::Status& st : job.served) ASSERT_TRUE(st.ok()) << st;
}

class RejoinTest : public ::testing::TestWithParam<Consistency> {};

TEST_P(RejoinTest, AKilledWorkerRejoinsWhileTheOtherTrainsOn) {
  ServerOptions so;
  so.consistency = GetParam();
  so.max_staleness = 1;
  so.timeout = absl::Seconds(60);
  Job job(so);
  Worker0 w0(job);
  // Incarnation 0 of worker 1 trains until it is killed.
  const std::string report0 = job.dir.File("report0");
  const pid_t first = Spawn(job.Worker1(0, -1, report0));
  ASSERT_TRUE(WaitFor([&] { return ReadReport(report0).clock >= 20; }, 60));
  kill(first, SIGKILL);
  EXPECT_EQ(WaitExit(first), 128 + SIGKILL);
  const int64_t killed_at = ReadReport(report0).clock;
  // Worker 0 goes on without it: under bounded s = 1 it could take no more
  // than 2 steps if the gate still waited for the dead worker.
  const int64_t w0_at_kill = w0.clock.load();
  ASSERT_TRUE(WaitFor([&] { return w0.clock.load() >= w0_at_kill + 100; }, 60))
      << "worker 0 is stuck at step " << w0.clock.load() << " with worker 1 dead";
  // Incarnation 1 rejoins, trains 30 steps and leaves.
  const int64_t w0_at_rejoin = w0.clock.load();
  const std::string report1 = job.dir.File("report1");
  const pid_t second = Spawn(job.Worker1(1, 30, report1));
  EXPECT_EQ(WaitExit(second), 0);
  ASSERT_NO_FATAL_FAILURE(EndJob(job, w0));
  const Report joined = ReadReport(report1);
  std::printf(
      "[ measured ] %s: worker 1 killed at step %lld; worker 0 went from step %lld to %lld "
      "meanwhile; incarnation 1 joined at step %lld\n",
      so.consistency == Consistency::kAsync ? "async" : "bounded s=1",
      static_cast<long long>(killed_at), static_cast<long long>(w0_at_kill),
      static_cast<long long>(w0_at_rejoin), static_cast<long long>(joined.join_clock));
  EXPECT_EQ(joined.pushes, 30);
  // It starts where the live worker is, never below a step it pushed.
  EXPECT_GE(joined.join_clock, killed_at);
  EXPECT_GE(joined.join_clock, w0_at_rejoin);
  // It pulled the shard as trained: every update moves each value by
  // exactly -lr, so the value it pulled counts the updates before it.
  const double pulled_updates = (1.0 - joined.joined) / kLr;
  EXPECT_NEAR(pulled_updates, std::round(pulled_updates), 1e-3);  // printed with 9 digits
  EXPECT_GE(pulled_updates, w0_at_rejoin - 2);
  const int64_t w0_pushes = w0.clock.load();
  for (size_t i = 0; i < job.servers.size(); ++i) {
    const ServerStats st = job.servers[i]->stats();
    EXPECT_EQ(st.departures, 1) << "PS task " << i;
    EXPECT_EQ(st.rejoins, 1) << "PS task " << i;
    // Every push that arrived counts: worker 0's, the killed incarnation's
    // (the one in flight at the kill may or may not have), the new one's.
    EXPECT_GE(st.pushes, w0_pushes + killed_at + 30);
    EXPECT_LE(st.pushes, w0_pushes + killed_at + 1 + 30);
    if (so.consistency == Consistency::kAsync) {
      EXPECT_EQ(st.updates, st.pushes);
    }
    // And the shard is exactly its updates: nothing applied twice or torn.
    const float* v = job.servers[i]->values();
    const float want = 1.0f - static_cast<float>(st.updates) * kLr;
    for (int64_t k = 0; k < job.map.shards[i].count; ++k) {
      ASSERT_EQ(v[k], want) << "PS task " << i << ", value " << k;
    }
  }
}

// Two restarts of one worker in an attempt that resumed at step 1,000: each
// incarnation's data goes on where the pushes of the last one ended, though
// its clock jumped to the live worker's at the first rejoin, and every PS
// task's audit counts each of its data steps once.
TEST_P(RejoinTest, EachRestartResumesTheDataWhereTheLastIncarnationsPushesEnded) {
  ServerOptions so;
  so.consistency = GetParam();
  so.max_staleness = 1;
  so.timeout = absl::Seconds(60);
  so.start_step = 1000;
  Job job(so);
  Worker0 w0(job);
  auto run_until_killed = [&](int64_t incarnation, const std::string& report) {
    const pid_t pid = Spawn(job.Worker1(incarnation, -1, report));
    EXPECT_TRUE(WaitFor([&] { return ReadReport(report).pushes >= 20; }, 60));
    kill(pid, SIGKILL);
    EXPECT_EQ(WaitExit(pid), 128 + SIGKILL);
    const int64_t w0_at_kill = w0.clock.load();
    EXPECT_TRUE(WaitFor([&] { return w0.clock.load() >= w0_at_kill + 100; }, 60));
    return ReadReport(report);
  };
  const Report k0 = run_until_killed(0, job.dir.File("report0"));
  const Report k1 = run_until_killed(1, job.dir.File("report1"));
  const std::string report2 = job.dir.File("report2");
  const pid_t last = Spawn(job.Worker1(2, 10, report2));
  EXPECT_EQ(WaitExit(last), 0);
  ASSERT_NO_FATAL_FAILURE(EndJob(job, w0));
  const Report k2 = ReadReport(report2);
  std::printf(
      "[ measured ] %s: incarnation 1 joined at clock %lld and data step %lld, incarnation 2 at "
      "clock %lld and data step %lld\n",
      so.consistency == Consistency::kAsync ? "async" : "bounded s=1",
      static_cast<long long>(k1.join_clock), static_cast<long long>(k1.join_step),
      static_cast<long long>(k2.join_clock), static_cast<long long>(k2.join_step));
  // Each resumes after the steps the last pushed (and the one in flight at
  // the kill, if it arrived), not at its clock.
  EXPECT_GE(k1.join_step, 1000 + k0.pushes);
  EXPECT_LE(k1.join_step, 1000 + k0.pushes + 1);
  EXPECT_GT(k1.join_clock, k1.join_step - 1000 + 50) << "its clock jumped ahead of its data";
  EXPECT_GE(k2.join_step, k1.join_step + k1.pushes);
  EXPECT_LE(k2.join_step, k1.join_step + k1.pushes + 1);
  EXPECT_EQ(k2.data_step, k2.join_step + 10);
  for (size_t i = 0; i < job.servers.size(); ++i) {
    const ServerStats st = job.servers[i]->stats();
    ASSERT_EQ(st.workers.size(), 2u);
    const ServerStats::WorkerData& d0 = st.workers[0];
    EXPECT_EQ(d0.first_step, 1000) << "PS task " << i;
    EXPECT_EQ(d0.pushes, w0.clock.load()) << "PS task " << i;
    EXPECT_EQ(d0.next_step, 1000 + d0.pushes) << "PS task " << i;
    EXPECT_EQ(d0.lost, 0) << "PS task " << i;
    const ServerStats::WorkerData& d1 = st.workers[1];
    EXPECT_EQ(d1.first_step, 1000) << "PS task " << i;
    EXPECT_EQ(d1.next_step, k2.data_step) << "PS task " << i;
    EXPECT_EQ(d1.pushes + d1.lost, d1.next_step - 1000) << "PS task " << i;
    EXPECT_LE(d1.lost, 2) << "PS task " << i << ": at most the push in flight at each kill";
  }
}

// Under sync a missing worker would change the step, so the same kill fails
// the PS tasks, naming the worker.
TEST(RejoinSyncTest, AKilledWorkerFailsTheJob) {
  ServerOptions so;
  so.timeout = absl::Seconds(60);
  Job job(so);
  Worker0 w0(job);
  const std::string report0 = job.dir.File("report0");
  const pid_t first = Spawn(job.Worker1(0, -1, report0));
  ASSERT_TRUE(WaitFor([&] { return ReadReport(report0).clock >= 5; }, 60));
  kill(first, SIGKILL);
  EXPECT_EQ(WaitExit(first), 128 + SIGKILL);
  for (auto& t : job.threads) t.join();
  job.threads.clear();
  for (const absl::Status& st : job.served) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    EXPECT_THAT(st.message(), HasSubstr("the link to worker 1 broke"));
  }
  job.servers.clear();  // worker 0's links break with them
  w0.stop.store(true);
  w0.thread.join();
  EXPECT_FALSE(w0.status.ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, RejoinTest,
                         ::testing::Values(Consistency::kAsync, Consistency::kBounded));

}  // namespace
}  // namespace yoke::ps
