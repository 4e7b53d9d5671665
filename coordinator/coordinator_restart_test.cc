// The coordinator over a real SQLite file: what survives a restart.
#include <unistd.h>

#include <cstdio>

#include "common/testing/fake_clock.h"
#include "config/config.h"
#include "coordinator/auth_store.h"
#include "coordinator/coordinator.h"
#include "coordinator/sqlite_job_store.h"
#include "gtest/gtest.h"

namespace yoke::server {
namespace {

constexpr char kSpec[] = R"(
name: durable
model: {zoo: mlp, hidden: [8]}
data:
  train: {format: synthetic, shape: [4, 4, 1], num_classes: 2, num_examples: 64}
training:
  epochs: 2
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
)";

TEST(CoordinatorRestartTest, JobsHistoryAndLogsSurviveARestartOnTheSameFile) {
  const std::string path = "/tmp/yoke_coord_restart_" + std::to_string(getpid()) + ".db";
  for (const char* sfx : {"", "-wal", "-shm"}) std::remove((path + sfx).c_str());
  common::FakeClock clock;
  auto spec = common::LoadJobSpecString(kSpec, {});
  ASSERT_TRUE(spec.ok());
  std::string running_id, done_id;
  {
    auto store = SqliteJobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto coord = Coordinator::Create(store->get(), &clock, CoordinatorOptions());
    ASSERT_TRUE(coord.ok());
    v1::RegisterWorkerRequest reg;
    for (int i = 0; i < 2; ++i) {
      v1::Device* d = reg.add_devices();
      d->set_kind("cpu");
      d->set_index(i);
    }
    const std::string w = (*coord)->RegisterWorker(reg)->worker_id();
    running_id = *(*coord)->Submit(*spec, 0);
    done_id = *(*coord)->Submit(*spec, 3);
    v1::HeartbeatRequest hb;
    hb.set_worker_id(w);
    v1::AttemptStatus* a = hb.add_attempts();
    a->set_job_id(running_id);
    a->set_attempt(1);
    a->set_phase(v1::AttemptStatus::RUNNING);
    a->mutable_progress()->set_step(17);
    v1::EpochResult* e = a->add_epochs();
    e->set_epoch(1);
    e->set_test_accuracy(0.5);
    a->add_logs()->set_text("epoch 1 done");
    v1::AttemptStatus* b = hb.add_attempts();
    b->set_job_id(done_id);
    b->set_attempt(1);
    b->set_phase(v1::AttemptStatus::EXITED);
    b->mutable_result()->set_test_accuracy(0.75);
    b->add_logs()->set_text("bye");
    ASSERT_TRUE((*coord)->Heartbeat(hb).ok());
    // Destroyed without a Tick: the unflushed progress is written on the way out.
  }
  auto store = SqliteJobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto coord = Coordinator::Create(store->get(), &clock, CoordinatorOptions());
  ASSERT_TRUE(coord.ok()) << coord.status();
  auto running = (*coord)->Get(running_id);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(running->state(), v1::JOB_RUNNING);
  EXPECT_EQ(running->spec().name(), "durable");
  ASSERT_EQ(running->history_size(), 1);
  EXPECT_DOUBLE_EQ(running->history(0).test_accuracy(), 0.5);
  EXPECT_EQ(running->progress().step(), 17);
  ASSERT_EQ(running->attempts_size(), 1);
  ASSERT_EQ(running->attempts(0).assignments_size(), 1);
  EXPECT_EQ(running->attempts(0).assignments(0).worker_id(), "w-1");
  auto done = (*coord)->Get(done_id);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->state(), v1::JOB_SUCCEEDED);
  EXPECT_EQ(done->priority(), 3);
  EXPECT_DOUBLE_EQ(done->result().test_accuracy(), 0.75);
  auto logs = (*coord)->ReadLogs(running_id, 0, 10);
  ASSERT_TRUE(logs.ok());
  ASSERT_EQ(logs->size(), 1u);
  EXPECT_EQ((*logs)[0].text(), "epoch 1 done");
  EXPECT_EQ((*(*coord)->ReadLogs(done_id, 0, 10))[0].text(), "bye");
  // New ids continue after the old ones.
  EXPECT_EQ(*(*coord)->Submit(*spec, 0), "job-000003");
  coord->reset();
  store->reset();
  for (const char* sfx : {"", "-wal", "-shm"}) std::remove((path + sfx).c_str());
}

// Worker ids outlive a coordinator restart: a restarted coordinator never
// hands a live daemon's id to a new one, and a daemon registering again
// under an id must prove it with that id's incarnation token.
TEST(CoordinatorRestartTest, WorkerIdsAreNeverReusedAndProvenByTheirIncarnation) {
  const std::string path = "/tmp/yoke_coord_ids_" + std::to_string(getpid()) + ".db";
  auto remove_files = [&] {
    for (const char* f : {"", "-wal", "-shm", ".auth", ".auth-wal", ".auth-shm"}) {
      std::remove((path + f).c_str());
    }
  };
  remove_files();
  common::FakeClock clock;
  v1::RegisterWorkerRequest fresh;
  fresh.set_hostname("h");
  v1::RegisterWorkerResponse x, y;
  {
    auto store = SqliteJobStore::Open(path);
    auto auth = AuthStore::Open(path + ".auth");
    ASSERT_TRUE(store.ok() && auth.ok());
    CoordinatorOptions options;
    UseAuthStoreForWorkerIds(auth->get(), &options);
    auto coord = Coordinator::Create(store->get(), &clock, options);
    ASSERT_TRUE(coord.ok());
    x = *(*coord)->RegisterWorker(fresh);
    y = *(*coord)->RegisterWorker(fresh);
  }
  EXPECT_EQ(x.worker_id(), "w-1");
  EXPECT_EQ(y.worker_id(), "w-2");
  EXPECT_EQ(x.incarnation().size(), 64u);
  EXPECT_NE(x.incarnation(), y.incarnation());

  // The coordinator restarts on the same files; it has no job, so nothing
  // tells it about w-1 and w-2 but the files.
  auto store = SqliteJobStore::Open(path);
  auto auth = AuthStore::Open(path + ".auth");
  ASSERT_TRUE(store.ok() && auth.ok());
  CoordinatorOptions options;
  UseAuthStoreForWorkerIds(auth->get(), &options);
  auto coord = Coordinator::Create(store->get(), &clock, options);
  ASSERT_TRUE(coord.ok());
  auto z = (*coord)->RegisterWorker(fresh);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->worker_id(), "w-3");  // not w-1 or w-2, whose daemons live on

  v1::RegisterWorkerRequest again = fresh;
  again.set_worker_id("w-2");
  auto r = (*coord)->RegisterWorker(again);  // no token
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("without its incarnation token"), std::string::npos);
  again.set_incarnation(x.incarnation());  // w-1's token
  r = (*coord)->RegisterWorker(again);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("does not match its incarnation token"), std::string::npos);
  again.set_incarnation(y.incarnation());  // its own
  r = (*coord)->RegisterWorker(again);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->worker_id(), "w-2");
  EXPECT_EQ(r->incarnation(), y.incarnation());
  coord->reset();
  store->reset();
  auth->reset();
  remove_files();
}

}  // namespace
}  // namespace yoke::server
