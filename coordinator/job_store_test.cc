#include "coordinator/job_store.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "coordinator/sqlite_job_store.h"
#include "gtest/gtest.h"

namespace yoke::server {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  std::string base = dir ? dir : "/tmp";
  std::string safe = name;
  for (char& c : safe) {
    if (c == '/') c = '_';
  }
  return base + "/yoke_store_" + std::to_string(getpid()) + "_" + safe;
}

void RemoveDb(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
}

v1::Job NewJob(const std::string& name, v1::JobState state, int priority = 0) {
  v1::Job j;
  j.mutable_spec()->set_name(name);
  j.set_state(state);
  j.set_priority(priority);
  j.set_create_time_ms(1000);
  return j;
}

// Every test runs against both implementations: the fake must behave like
// the real store, or tests that use it prove nothing.
class JobStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "memory") {
      store_ = std::make_unique<InMemoryJobStore>();
    } else {
      path_ = TempPath(::testing::UnitTest::GetInstance()->current_test_info()->name());
      RemoveDb(path_);
      auto s = SqliteJobStore::Open(path_);
      ASSERT_TRUE(s.ok()) << s.status();
      store_ = std::move(*s);
    }
  }
  void TearDown() override {
    store_.reset();
    if (!path_.empty()) RemoveDb(path_);
  }
  std::unique_ptr<JobStore> store_;
  std::string path_;
};

TEST_P(JobStoreTest, CreateAssignsIncreasingIdsAndGetReturnsTheJob) {
  auto a = store_->Create(NewJob("a", v1::JOB_PENDING));
  auto b = store_->Create(NewJob("b", v1::JOB_PENDING));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, "job-000001");
  EXPECT_EQ(*b, "job-000002");
  auto got = store_->Get("job-000002");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->id(), "job-000002");
  EXPECT_EQ(got->spec().name(), "b");
  EXPECT_EQ(store_->Get("job-000009").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(JobStoreTest, ListFiltersByStateAndPagesNewestFirst) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(
        store_->Create(NewJob("j" + std::to_string(i), i % 2 ? v1::JOB_RUNNING : v1::JOB_PENDING))
            .ok());
  }
  JobListQuery q;
  q.page_size = 2;
  auto p1 = store_->List(q);
  ASSERT_TRUE(p1.ok()) << p1.status();
  ASSERT_EQ(p1->jobs.size(), 2u);
  EXPECT_EQ(p1->jobs[0].id(), "job-000005");
  EXPECT_EQ(p1->jobs[1].id(), "job-000004");
  ASSERT_FALSE(p1->next_page_token.empty());
  q.page_token = p1->next_page_token;
  auto p2 = store_->List(q);
  ASSERT_TRUE(p2.ok());
  ASSERT_EQ(p2->jobs.size(), 2u);
  EXPECT_EQ(p2->jobs[0].id(), "job-000003");
  q.page_token = p2->next_page_token;
  auto p3 = store_->List(q);
  ASSERT_TRUE(p3.ok());
  ASSERT_EQ(p3->jobs.size(), 1u);
  EXPECT_EQ(p3->jobs[0].id(), "job-000001");
  EXPECT_EQ(p3->next_page_token, "");

  JobListQuery running;
  running.states = {v1::JOB_RUNNING};
  auto r = store_->List(running);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->jobs.size(), 2u);  // j1 and j3
  EXPECT_EQ(r->jobs[0].id(), "job-000004");
  EXPECT_EQ(r->jobs[1].id(), "job-000002");

  JobListQuery bad;
  bad.page_token = "not-a-token";
  EXPECT_EQ(store_->List(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// Five jobs with 900 KiB names: a page holds two (under its 2 MiB), even
// when more were asked for, and paging still visits every job once.
TEST_P(JobStoreTest, PagesEndBeforeTheirBytesPassTheLimit) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store_->Create(NewJob(std::string(900 << 10, 'a' + i), v1::JOB_PENDING)).ok());
  }
  JobListQuery q;
  q.page_size = 100;
  std::vector<size_t> page_sizes;
  std::string seen;
  do {
    auto p = store_->List(q);
    ASSERT_TRUE(p.ok()) << p.status();
    page_sizes.push_back(p->jobs.size());
    for (const v1::Job& j : p->jobs) seen += j.spec().name()[0];
    q.page_token = p->next_page_token;
  } while (!q.page_token.empty() && page_sizes.size() < 10);
  EXPECT_EQ(page_sizes, (std::vector<size_t>{2, 2, 1}));
  EXPECT_EQ(seen, "edcba");
  // A single job over the limit still comes back, alone.
  q = JobListQuery();
  q.max_bytes = 1000;
  auto one = store_->List(q);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->jobs.size(), 1u);
  EXPECT_FALSE(one->next_page_token.empty());
}

TEST_P(JobStoreTest, UpdateIsAllOrNothing) {
  auto id = store_->Create(NewJob("a", v1::JOB_PENDING));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(store_
                  ->Update(*id,
                           [](v1::Job* j) {
                             j->set_state(v1::JOB_RUNNING);
                             j->add_attempts()->set_number(1);
                             return absl::OkStatus();
                           })
                  .ok());
  absl::Status s = store_->Update(*id, [](v1::Job* j) {
    j->set_state(v1::JOB_FAILED);
    return absl::AbortedError("changed my mind");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  auto got = store_->Get(*id);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state(), v1::JOB_RUNNING);
  EXPECT_EQ(got->attempts_size(), 1);
  EXPECT_EQ(store_->Update("job-404", [](v1::Job*) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kNotFound);

  v1::Job put = *got;
  put.set_state(v1::JOB_SUCCEEDED);
  ASSERT_TRUE(store_->Put(put).ok());
  JobListQuery q;
  q.states = {v1::JOB_SUCCEEDED};
  EXPECT_EQ(store_->List(q)->jobs.size(), 1u);  // the indexed column moved too
  put.set_id("job-404");
  EXPECT_EQ(store_->Put(put).code(), absl::StatusCode::kNotFound);
}

TEST_P(JobStoreTest, LogsGetPerJobSequenceNumbers) {
  auto a = store_->Create(NewJob("a", v1::JOB_RUNNING));
  auto b = store_->Create(NewJob("b", v1::JOB_RUNNING));
  std::vector<v1::LogLine> lines(3);
  for (int i = 0; i < 3; ++i) lines[i].set_text("a" + std::to_string(i));
  ASSERT_TRUE(store_->AppendLogs(*a, &lines).ok());
  EXPECT_EQ(lines[2].seq(), 3);
  std::vector<v1::LogLine> other(1);
  other[0].set_text("b0");
  ASSERT_TRUE(store_->AppendLogs(*b, &other).ok());
  EXPECT_EQ(other[0].seq(), 1);
  std::vector<v1::LogLine> more(1);
  more[0].set_text("a3");
  ASSERT_TRUE(store_->AppendLogs(*a, &more).ok());
  EXPECT_EQ(more[0].seq(), 4);

  auto read = store_->ReadLogs(*a, 1, 2);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].text(), "a1");
  EXPECT_EQ((*read)[1].seq(), 3);
  EXPECT_EQ(*store_->LastLogSeq(*a), 4);
  EXPECT_EQ(*store_->LastLogSeq(*b), 1);
  EXPECT_TRUE(store_->ReadLogs(*b, 1, 10)->empty());
  EXPECT_EQ(store_->ReadLogs("job-404", 0, 10).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->AppendLogs("job-404", &more).code(), absl::StatusCode::kNotFound);
}

TEST_P(JobStoreTest, ForEachNonTerminalSkipsFinishedJobsOldestFirst) {
  ASSERT_TRUE(store_->Create(NewJob("a", v1::JOB_SUCCEEDED)).ok());
  ASSERT_TRUE(store_->Create(NewJob("b", v1::JOB_RUNNING)).ok());
  ASSERT_TRUE(store_->Create(NewJob("c", v1::JOB_CANCELLED)).ok());
  ASSERT_TRUE(store_->Create(NewJob("d", v1::JOB_PENDING)).ok());
  ASSERT_TRUE(store_->Create(NewJob("e", v1::JOB_FAILED)).ok());
  std::vector<std::string> live;
  auto names = [&](v1::Job j) {
    live.push_back(j.spec().name());
    return absl::OkStatus();
  };
  ASSERT_TRUE(store_->ForEachNonTerminal(names).ok());
  EXPECT_EQ(live, (std::vector<std::string>{"b", "d"}));
  // The visitor's first error ends the walk and is returned.
  live.clear();
  const absl::Status stop = absl::AbortedError("enough");
  EXPECT_EQ(store_->ForEachNonTerminal([&](v1::Job j) {
    live.push_back(j.spec().name());
    return stop;
  }),
            stop);
  EXPECT_EQ(live, (std::vector<std::string>{"b"}));
}

TEST_P(JobStoreTest, SpecGivenSerializedIsStoredWholeAndSummariesCarryItsName) {
  v1::JobSpec spec;
  spec.set_name("wide");
  for (int i = 0; i < 1000; ++i) spec.mutable_model()->add_layers()->mutable_relu();
  spec.mutable_distribution()->set_workers(2);
  v1::Job job = NewJob("ignored", v1::JOB_PENDING);  // its own spec is replaced
  auto id = store_->CreateWithSpec(job, spec.SerializeAsString());
  ASSERT_TRUE(id.ok()) << id.status();
  auto got = store_->Get(*id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec().SerializeAsString(), spec.SerializeAsString());
  EXPECT_EQ(got->state(), v1::JOB_PENDING);

  job.set_id(*id);
  job.set_state(v1::JOB_CANCELLED);
  ASSERT_TRUE(store_->PutWithSpec(job, spec.SerializeAsString()).ok());
  ASSERT_TRUE(store_->Create(NewJob("small", v1::JOB_PENDING)).ok());

  JobListQuery q;
  q.summary = true;
  auto page = store_->List(q);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 2u);
  EXPECT_EQ(page->jobs[0].spec().name(), "small");
  const v1::Job& summary = page->jobs[1];
  EXPECT_EQ(summary.id(), *id);
  EXPECT_EQ(summary.state(), v1::JOB_CANCELLED);
  v1::JobSpec name_only;
  name_only.set_name("wide");
  EXPECT_EQ(summary.spec().SerializeAsString(), name_only.SerializeAsString());
  q.summary = false;
  page = store_->List(q);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->jobs[1].spec().model().layers_size(), 1000);
}

INSTANTIATE_TEST_SUITE_P(Stores, JobStoreTest, ::testing::Values("memory", "sqlite"),
                         [](const auto& info) { return info.param; });

TEST(ParseJobTest, SummaryKeepsEveryFieldButTheSpecsBody) {
  v1::Job job = NewJob("n", v1::JOB_RUNNING, 3);
  job.set_id("job-000007");
  job.set_owner("alice");
  job.add_attempts()->set_number(2);
  job.mutable_progress()->set_step(40);
  job.mutable_spec()->mutable_model()->set_zoo("mlp");
  const std::string spec = job.spec().SerializeAsString();
  const std::string bytes = SerializeJobWithSpec(job, spec);
  v1::Job whole;
  ASSERT_TRUE(ParseJob(bytes, /*summary=*/false, &whole));
  EXPECT_EQ(whole.SerializeAsString(), job.SerializeAsString());
  v1::Job summary;
  ASSERT_TRUE(ParseJob(bytes, /*summary=*/true, &summary));
  v1::Job want = job;
  want.mutable_spec()->clear_model();
  EXPECT_EQ(summary.SerializeAsString(), want.SerializeAsString());
  // Bytes that are not a job are refused, not half read.
  EXPECT_FALSE(ParseJob(std::string("\x12\x05"
                                    "ab",
                                    4),
                        /*summary=*/true, &summary));
}

TEST(SqliteJobStoreTest, ReopenKeepsJobsLogsAndIdSequence) {
  const std::string path = TempPath("reopen");
  RemoveDb(path);
  {
    auto store = SqliteJobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto id = (*store)->Create(NewJob("kept", v1::JOB_RUNNING));
    ASSERT_TRUE(id.ok());
    std::vector<v1::LogLine> lines(1);
    lines[0].set_text("hello");
    ASSERT_TRUE((*store)->AppendLogs(*id, &lines).ok());
  }
  auto store = SqliteJobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto got = (*store)->Get("job-000001");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->spec().name(), "kept");
  EXPECT_EQ((*(*store)->ReadLogs("job-000001", 0, 10))[0].text(), "hello");
  EXPECT_EQ(*(*store)->Create(NewJob("next", v1::JOB_PENDING)), "job-000002");
  store->reset();
  RemoveDb(path);
}

TEST(SqliteJobStoreTest, GarbageFileIsAClearErrorNotACrash) {
  const std::string path = TempPath("garbage");
  RemoveDb(path);
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>(i * 31 + 7));
  }
  auto store = SqliteJobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status();
  EXPECT_NE(store.status().message().find("not a database"), std::string::npos) << store.status();
  RemoveDb(path);
}

TEST(SqliteJobStoreTest, SecondOpenOfTheSameFileIsRefused) {
  const std::string path = TempPath("locked");
  RemoveDb(path);
  auto first = SqliteJobStore::Open(path);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = SqliteJobStore::Open(path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("locked"), std::string::npos) << second.status();
  first->reset();
  RemoveDb(path);
}

TEST(SqliteJobStoreTest, MissingDirectoryIsUnavailable) {
  auto store = SqliteJobStore::Open("/nonexistent-dir-yoke/x/store.db");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace yoke::server
