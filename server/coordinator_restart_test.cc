// The coordinator over a real SQLite file: what survives a restart.
#include <unistd.h>

#include <cstdio>

#include "common/config.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/sqlite_job_store.h"

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

}  // namespace
}  // namespace yoke::server
