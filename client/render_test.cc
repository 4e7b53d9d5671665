#include "client/render.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/testing/file_contents.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::client {
namespace {

using common::FileContents;
using ::testing::HasSubstr;

TEST(RenderTest, TableColumnsAreAsWideAsTheirWidestCell) {
  std::string t = FormatTable(
      {{"ID", "STATE", "REASON"}, {"job-10", "RUNNING", ""}, {"j", "PENDING", "needs 2 cpu"}});
  EXPECT_EQ(t,
            "ID      STATE    REASON\n"
            "job-10  RUNNING\n"
            "j       PENDING  needs 2 cpu\n");
}

TEST(RenderTest, AgesAndDurations) {
  const int64_t now = 1'000'000'000;
  EXPECT_EQ(FormatAge(now, 0), "-");
  EXPECT_EQ(FormatAge(now, now - 5'400), "5s");
  EXPECT_EQ(FormatAge(now, now - 119'000), "119s");
  EXPECT_EQ(FormatAge(now, now - 180'000), "3m");
  EXPECT_EQ(FormatAge(now, now - 3 * 3'600'000), "3h");
  EXPECT_EQ(FormatAge(now, now - 3 * 86'400'000LL), "3d");
  EXPECT_EQ(FormatAge(now, now + 5'000), "0s");  // clock skew never goes negative
}

TEST(RenderTest, ParsesJobStatesAndListsTheKnownOnes) {
  v1::JobState s;
  std::string e;
  ASSERT_TRUE(ParseJobState("running", &s, &e));
  EXPECT_EQ(s, v1::JOB_RUNNING);
  ASSERT_TRUE(ParseJobState("JOB_SUCCEEDED", &s, &e));
  EXPECT_EQ(s, v1::JOB_SUCCEEDED);
  EXPECT_FALSE(ParseJobState("runing", &s, &e));
  EXPECT_NE(e.find("unknown job state 'runing'"), std::string::npos) << e;
  EXPECT_NE(e.find("running"), std::string::npos) << e;
  EXPECT_FALSE(ParseJobState("state_unspecified", &s, &e));
}

TEST(RenderTest, JobsTableShowsProgressAccuracyAndReason) {
  v1::Job a;
  a.set_id("job-2");
  a.mutable_spec()->set_name("mlp");
  a.set_state(v1::JOB_RUNNING);
  a.set_create_time_ms(1000);
  a.mutable_progress()->set_epoch(1);
  a.mutable_progress()->set_epochs(5);
  a.mutable_progress()->set_step_in_epoch(30);
  a.mutable_progress()->set_steps_per_epoch(938);
  a.mutable_progress()->set_step(968);
  a.add_history()->set_test_accuracy(0.8512);
  v1::Job b;
  b.set_id("job-1");
  b.set_state(v1::JOB_PENDING);
  b.set_reason("needs 4 cpu devices on 1 worker;\nfree: 2");
  b.set_create_time_ms(1000);
  std::string t = JobsTable({a, b}, 61'000);
  // Widths: ID 5, NAME 4, STATE 7, PROGRESS 21, ACCURACY 8, AGE 3; the
  // reason's newline becomes a space so the row stays one line.
  EXPECT_EQ(t, "ID     NAME  STATE    PROGRESS" + std::string(15, ' ') +
                   "ACCURACY  AGE  REASON\n"
                   "job-2  mlp   RUNNING  epoch 2/5 step 30/938  0.8512    60s\n"
                   "job-1  -     PENDING  -" +
                   std::string(22, ' ') + "-" + std::string(9, ' ') +
                   "60s  needs 4 cpu devices on 1 worker; free: 2\n");
}

// A 4 MB name or reason must not make a 4 MB table: long cells are cut.
TEST(RenderTest, JobsTableShortensLongFields) {
  v1::Job j;
  j.set_id("job-1");
  j.mutable_spec()->set_name(std::string(4'000'000, 'n'));
  j.set_state(v1::JOB_FAILED);
  j.set_reason(std::string(1'000'000, 'r'));
  const std::string t = JobsTable({j}, 0);
  EXPECT_LT(t.size(), 300u);
  EXPECT_NE(t.find(std::string(37, 'n') + "..."), std::string::npos) << t;
  EXPECT_NE(t.find(std::string(77, 'r') + "..."), std::string::npos) << t;
}

TEST(RenderTest, WorkersTableShowsTheAdvertisedAddress) {
  v1::Worker a, b;
  a.set_id("w-1");
  a.set_hostname("node-a");
  a.set_address("10.0.0.5");
  a.set_alive(true);
  b.set_id("w-2");
  b.set_hostname("node-b");  // registered by an older worker: no address
  std::string t = WorkersTable({a, b}, 0);
  std::string header = t.substr(0, t.find('\n'));
  ASSERT_NE(header.find("ADDRESS"), std::string::npos) << t;
  const size_t col = header.find("ADDRESS");
  std::string row1 = t.substr(t.find("w-1"));
  row1 = row1.substr(0, row1.find('\n'));
  EXPECT_EQ(row1.substr(col, 8), "10.0.0.5") << t;
  std::string row2 = t.substr(t.find("w-2"));
  EXPECT_EQ(row2.substr(col, 1), "-") << t;
}

TEST(RenderTest, WorkersTableFlagsInsecureWorkers) {
  v1::Worker a, b;
  a.set_id("w-1");
  a.set_auth("certificate");
  b.set_id("w-2");
  b.set_auth("insecure");
  std::string t = WorkersTable({a, b}, 0);
  std::string row1 = t.substr(t.find("w-1"));
  row1 = row1.substr(0, row1.find('\n'));
  std::string row2 = t.substr(t.find("w-2"));
  row2 = row2.substr(0, row2.find('\n'));
  EXPECT_NE(row1.find("certificate"), std::string::npos) << t;
  EXPECT_EQ(row1.find("INSECURE"), std::string::npos) << t;
  EXPECT_NE(row2.find("INSECURE"), std::string::npos) << t;
}

TEST(RenderTest, JobDetailsSplitTheStepTime) {
  v1::Job job;
  job.set_id("job-3");
  job.set_state(v1::JOB_RUNNING);
  auto* p = job.mutable_progress();
  p->set_step(40);
  p->set_total_steps(100);
  p->set_window_steps(10);
  p->set_step_seconds(0.200);               // 20 ms a step
  p->set_data_wait_seconds(0.010);          // 1 ms
  p->set_allreduce_exposed_seconds(0.030);  // 3 ms
  p->set_allreduce_seconds(0.120);          // 12 ms, 75% hidden
  const std::string out = JobDetails(job, 0);
  EXPECT_THAT(out, HasSubstr("step time: step 20.0 ms: compute 16.0 ms (80%), data wait 1.0 ms "
                             "(5%), exposed allreduce 3.0 ms (15%); allreduce 12.0 ms in all, 75% "
                             "hidden behind backward"))
      << out;
  p->set_window_steps(0);  // an old trainer's report: no line
  EXPECT_THAT(JobDetails(job, 0), ::testing::Not(HasSubstr("step time")));
}

TEST(RenderTest, JobDetailsShowValidationAndEarlyStopping) {
  v1::Job job;
  job.set_id("job-4");
  job.set_state(v1::JOB_SUCCEEDED);
  auto* e = job.add_history();
  e->set_epoch(1);
  e->set_test_accuracy(0.8);
  e->set_validation_loss(0.5);
  e->set_validation_accuracy(0.81);
  auto* r = job.mutable_result();
  r->set_epochs(3);
  r->set_stopped_early(true);
  r->set_best_epoch(1);
  r->set_best_checkpoint("/ckpt/best.ckpt");
  const std::string out = JobDetails(job, 0);
  EXPECT_THAT(out, HasSubstr("epoch 1: train loss 0.0000 acc 0.0000 | validation loss 0.5000 acc "
                             "0.8100 | test loss 0.0000 acc 0.8000"))
      << out;
  EXPECT_THAT(out, HasSubstr("| stopped early, best epoch 1 (/ckpt/best.ckpt)")) << out;
  // Without a validation split or early stopping, neither appears.
  e->clear_validation_loss();
  e->clear_validation_accuracy();
  r->clear_stopped_early();
  r->clear_best_epoch();
  r->clear_best_checkpoint();
  EXPECT_THAT(JobDetails(job, 0), ::testing::Not(HasSubstr("validation")));
  EXPECT_THAT(JobDetails(job, 0), ::testing::Not(HasSubstr("best epoch")));
}

// A parameter-server job's shares say which ranks are replicas and which PS
// tasks; an allreduce job's say nothing more.
TEST(RenderTest, JobDetailsNameAParameterServerJobsRoles) {
  v1::Job job;
  job.set_id("job-5");
  auto* d = job.mutable_spec()->mutable_distribution();
  d->set_workers(2);
  d->set_strategy("parameter_server");
  d->set_parameter_servers(3);
  auto* a = job.add_attempts();
  a->set_number(1);
  a->set_world_size(5);
  auto* s0 = a->add_assignments();
  s0->set_worker_id("w-1");
  s0->set_first_rank(0);
  s0->set_num_replicas(3);
  s0->add_devices(0);
  auto* s1 = a->add_assignments();
  s1->set_worker_id("w-2");
  s1->set_first_rank(3);
  s1->set_num_replicas(2);
  s1->add_devices(0);
  s1->set_incarnation(2);
  const std::string out = JobDetails(job, 0);
  EXPECT_THAT(out, HasSubstr("ranks 0..2 on w-1 devices [0] (replica 0; PS tasks 0, 2)\n")) << out;
  EXPECT_THAT(out, HasSubstr("ranks 3..4 on w-2 devices [0] (replica 1; PS task 1), restarted "
                             "alone 2 times\n"))
      << out;
  d->clear_strategy();
  EXPECT_THAT(JobDetails(job, 0), HasSubstr("ranks 0..2 on w-1 devices [0]\n"));
  EXPECT_THAT(out, Not(HasSubstr("ps: "))) << "no PS line before a step is reported";
}

TEST(RenderTest, JobDetailsShowAParameterServerJobsFigures) {
  v1::Job job;
  job.set_id("job-6");
  v1::StepProgress& p = *job.mutable_progress();
  p.set_step(120);
  p.set_total_steps(1000);
  p.set_window_steps(4);
  v1::PsWindow& w = *p.mutable_ps();
  w.set_pushes(120);
  w.set_wait_seconds(0.024);
  w.set_ps_tasks(2);
  w.set_updates(238);
  w.set_updates_per_second(48.5);
  w.set_queue_depth(3);
  w.set_held_answers(7);
  std::string out = JobDetails(job, 0);
  EXPECT_THAT(out, HasSubstr("ps:        replica 0: 120 pushes, 6.0 ms waiting per step; 2 PS "
                             "tasks: 48.5 updates/s, 3 pushes queued, 7 answers held\n"))
      << out;
  w.set_queue_depth(1);
  EXPECT_THAT(JobDetails(job, 0), HasSubstr(", 1 push queued, "));
  w.set_ps_tasks(0);
  out = JobDetails(job, 0);
  EXPECT_THAT(out, HasSubstr("ps:        replica 0: 120 pushes, 6.0 ms waiting per step\n")) << out;
  job.mutable_progress()->clear_ps();
  EXPECT_THAT(JobDetails(job, 0), Not(HasSubstr("ps: ")));
}

TEST(RenderTest, JsonUsesProtoFieldNames) {
  v1::Job j;
  j.set_id("job-1");
  j.set_state(v1::JOB_SUCCEEDED);
  j.mutable_result()->set_test_accuracy(0.875);
  std::string s = ToJson(j);
  EXPECT_NE(s.find("\"test_accuracy\":0.875"), std::string::npos) << s;
  EXPECT_NE(s.find("\"state\":\"JOB_SUCCEEDED\""), std::string::npos) << s;
  EXPECT_EQ(ToJsonArray(std::vector<v1::Job>{}), "[]");
  EXPECT_EQ(ToJsonArray(std::vector<v1::Job>{j, j}), "[\n  " + s + ",\n  " + s + "\n]");
}

TEST(RenderTest, WatchViewPrintsStatesAndEachEpochOnce) {
  FILE* f = std::tmpfile();
  WatchView view(f, /*tty=*/false, std::chrono::milliseconds(0));
  v1::JobEvent ev;
  ev.mutable_job()->set_id("job-7");
  ev.mutable_job()->set_state(v1::JOB_PENDING);
  ev.mutable_job()->set_reason("needs 1 cpu");
  view.OnEvent(ev);
  ev.mutable_job()->set_state(v1::JOB_RUNNING);
  ev.mutable_job()->clear_reason();
  auto* p = ev.mutable_job()->mutable_progress();
  p->set_epoch(0);
  p->set_epochs(1);
  p->set_step(10);
  p->set_total_steps(20);
  p->set_step_in_epoch(10);
  p->set_steps_per_epoch(20);
  p->set_loss(0.5);
  view.OnEvent(ev);
  auto* e = ev.mutable_job()->add_history();
  e->set_epoch(1);
  e->set_test_accuracy(0.9);
  // The epoch's last step arrives with its summary: the summary says it.
  p->set_step(20);
  p->set_step_in_epoch(20);
  view.OnEvent(ev);
  view.OnEvent(ev);  // the same history again (a reconnect) prints nothing new
  // The last event carries both the last epoch and the terminal state.
  ev.mutable_job()->add_history()->set_epoch(2);
  ev.mutable_job()->set_state(v1::JOB_SUCCEEDED);
  view.OnEvent(ev);
  view.Close();
  std::string out = FileContents(f);
  std::fclose(f);
  EXPECT_EQ(out,
            "job-7 PENDING: needs 1 cpu\n"
            "job-7 RUNNING\n"
            "epoch 1/1 step 10/20 (global 10/20)  loss 0.5000  acc 0.0000  0 samples/s  ETA 0:00\n"
            "epoch 1 done: train loss 0.0000 acc 0.0000 | test loss 0.0000 acc 0.9000 | "
            "0 samples/s, 0.0s\n"
            "epoch 2 done: train loss 0.0000 acc 0.0000 | test loss 0.0000 acc 0.0000 | "
            "0 samples/s, 0.0s\n"
            "job-7 SUCCEEDED\n");
}

// The coordinator thins a long history (every other entry kept), so an
// epoch's position moves: each new epoch still prints once, and none twice.
TEST(RenderTest, WatchViewPrintsEachNewEpochOnceWhenTheHistoryIsThinned) {
  FILE* f = std::tmpfile();
  WatchView view(f, /*tty=*/false, std::chrono::milliseconds(0));
  v1::JobEvent ev;
  ev.mutable_job()->set_id("job-8");
  ev.mutable_job()->set_state(v1::JOB_RUNNING);
  for (int e : {1, 2, 3, 4}) ev.mutable_job()->add_history()->set_epoch(e);
  view.OnEvent(ev);
  ev.mutable_job()->clear_history();
  for (int e : {1, 3, 5}) ev.mutable_job()->add_history()->set_epoch(e);  // thinned, then 5
  view.OnEvent(ev);
  view.Close();
  std::string out = FileContents(f);
  std::fclose(f);
  std::vector<std::string> epochs;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, "epoch ")) epochs.emplace_back(line.substr(0, line.find(':')));
  }
  EXPECT_EQ(epochs, (std::vector<std::string>{"epoch 1 done", "epoch 2 done", "epoch 3 done",
                                              "epoch 4 done", "epoch 5 done"}))
      << out;
}

}  // namespace
}  // namespace yoke::client
