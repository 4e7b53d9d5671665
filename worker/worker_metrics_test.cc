// WorkerMetrics: what a trainer's progress reports become in the text
// exposition, and how their series end.
#include "worker/worker_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "telemetry/train_metrics.h"

namespace yoke::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::StepProgress Window(int steps, double step_s, double wait_s, double comm_s, double exposed_s) {
  v1::StepProgress p;
  p.set_step(100);
  p.set_epoch(1);
  p.set_step_in_epoch(25);
  p.set_steps_per_epoch(100);
  p.set_loss(0.5);
  p.set_samples_per_second(1234.5);
  p.set_window_steps(steps);
  for (int i = 0; i < steps; ++i) {
    common::CountStepSeconds(step_s, p.mutable_step_seconds_histogram());
  }
  p.set_step_seconds(steps * step_s);
  p.set_data_wait_seconds(steps * wait_s);
  p.set_allreduce_seconds(steps * comm_s);
  p.set_allreduce_exposed_seconds(steps * exposed_s);
  return p;
}

TEST(WorkerMetricsTest, ReportsBecomeLabelledSeries) {
  WorkerMetrics m;
  m.OnStep("job-1", 2, Window(10, 0.02, 0.001, 0.008, 0.002));
  m.OnStep("job-1", 2, Window(5, 0.2, 0.0, 0.0, 0.0));
  const std::string text = m.Exposition();
  const std::string labels = "job=\"job-1\",rank=\"2\",role=\"worker\"";
  EXPECT_THAT(text, HasSubstr("yoke_samples_per_second{" + labels + "} 1234.5"));
  EXPECT_THAT(text, HasSubstr("yoke_train_loss{" + labels + "} 0.5"));
  // Epoch 2 (1-based) a quarter done.
  EXPECT_THAT(text, HasSubstr("yoke_epoch{" + labels + "} 2.25"));
  // The histogram counts every step of both windows, each in its bucket.
  EXPECT_THAT(text, HasSubstr("yoke_step_seconds_count{" + labels + "} 15"));
  EXPECT_THAT(text, HasSubstr("yoke_step_seconds_bucket{" + labels + ",le=\"0.025\"} 10"));
  EXPECT_THAT(text, HasSubstr("yoke_step_seconds_bucket{" + labels + ",le=\"0.1\"} 10"));
  EXPECT_THAT(text, HasSubstr("yoke_step_seconds_bucket{" + labels + ",le=\"0.25\"} 15"));
  EXPECT_THAT(text, HasSubstr("yoke_step_seconds_sum{" + labels + "} 1.2"));
  // Gauges are the last window's means per step.
  EXPECT_THAT(text, HasSubstr("yoke_data_wait_seconds{" + labels + "} 0\n"));
  EXPECT_THAT(text, HasSubstr("yoke_allreduce_seconds{" + labels + "} 0\n"));
}

TEST(WorkerMetricsTest, AWindowsMeansArePerStep) {
  WorkerMetrics m;
  m.OnStep("j", 0, Window(4, 0.02, 0.001, 0.008, 0.002));
  const std::string text = m.Exposition();
  EXPECT_THAT(text,
              HasSubstr("yoke_data_wait_seconds{job=\"j\",rank=\"0\",role=\"worker\"} 0.001"));
  EXPECT_THAT(text,
              HasSubstr("yoke_allreduce_seconds{job=\"j\",rank=\"0\",role=\"worker\"} 0.008"));
  EXPECT_THAT(
      text,
      HasSubstr("yoke_allreduce_exposed_seconds{job=\"j\",rank=\"0\",role=\"worker\"} 0.002"));
}

TEST(WorkerMetricsTest, SeriesOfAnEndedTrainerExpire) {
  WorkerMetrics m(absl::Milliseconds(200));
  m.OnStep("old", 0, Window(1, 0.01, 0, 0, 0));
  m.OnStep("new", 1, Window(1, 0.01, 0, 0, 0));
  const int per_trainer = m.SeriesOf("old");
  // 7 metrics, the histogram being 14 buckets + Inf + sum + count.
  EXPECT_EQ(per_trainer, 6 + 17);
  m.OnEnd("old", 0);
  EXPECT_EQ(m.SeriesOf("old"), per_trainer) << "a scrape right after the end still sees it";
  absl::SleepFor(absl::Milliseconds(250));
  const std::string text = m.Exposition();
  EXPECT_THAT(text, Not(HasSubstr("job=\"old\"")));
  EXPECT_THAT(text, HasSubstr("job=\"new\""));
  // A restarted attempt of the same job and rank is live again.
  m.OnStep("new", 1, Window(1, 0.01, 0, 0, 0));
  m.OnEnd("new", 1);
  m.OnStep("new", 1, Window(1, 0.01, 0, 0, 0));
  absl::SleepFor(absl::Milliseconds(250));
  EXPECT_EQ(m.SeriesOf("new"), per_trainer);
}

// A PS job's trainer: its replica's pushes and mean wait per step (role
// worker) and its PS tasks' rate and queue (role ps); 4 more series, 2 for a
// trainer without PS tasks, none for an allreduce job's, and all expire.
TEST(WorkerMetricsTest, AParameterServerJobsFigures) {
  WorkerMetrics m(absl::Milliseconds(200));
  v1::StepProgress p = Window(4, 0.02, 0.001, 0.008, 0.008);
  v1::PsWindow& w = *p.mutable_ps();
  w.set_pushes(120);
  w.set_wait_seconds(0.024);
  w.set_ps_tasks(1);
  w.set_updates(119);
  w.set_updates_per_second(48.5);
  w.set_queue_depth(3);
  m.OnStep("ps", 0, p);
  v1::StepProgress replica_only = p;
  replica_only.mutable_ps()->set_ps_tasks(0);
  m.OnStep("ps", 1, replica_only);
  m.OnStep("plain", 0, Window(4, 0.02, 0.001, 0.008, 0.008));
  const std::string text = m.Exposition();
  const std::string worker = "job=\"ps\",rank=\"0\",role=\"worker\"";
  const std::string ps = "job=\"ps\",rank=\"0\",role=\"ps\"";
  EXPECT_THAT(text, HasSubstr("yoke_ps_pushes{" + worker + "} 120"));
  EXPECT_THAT(text, HasSubstr("yoke_ps_wait_seconds{" + worker + "} 0.006"));
  EXPECT_THAT(text, HasSubstr("yoke_ps_updates_per_second{" + ps + "} 48.5"));
  EXPECT_THAT(text, HasSubstr("yoke_ps_queue_depth{" + ps + "} 3"));
  EXPECT_THAT(text, Not(HasSubstr("yoke_ps_queue_depth{job=\"ps\",rank=\"1\"")));
  const int plain = m.SeriesOf("plain");
  EXPECT_EQ(plain, 6 + 17);
  EXPECT_EQ(m.SeriesOf("ps"), 2 * plain + 4 + 2);
  m.OnEnd("ps", 0);
  m.OnEnd("ps", 1);
  absl::SleepFor(absl::Milliseconds(250));
  EXPECT_THAT(m.Exposition(), Not(HasSubstr("job=\"ps\"")));
}

}  // namespace
}  // namespace yoke::worker
