// End to end, a pipeline job (configs/fashion_mnist_mlp_pipeline.yaml) on
// `yoke up --workers 2`: each worker's trainer runs one stage, the stages
// bootstrap their Gloo pairs through the coordinator's rendezvous, and the
// job trains one epoch to the accuracy one process reaches, reported by
// global rank 0 (stage 0, which computes neither the loss nor the logits).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

TEST(PipelineE2ETest, TwoStagesOnTwoWorkersTrainTheMlp) {
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  TestCluster::Watched run;
  ASSERT_TRUE(cluster.SubmitAndWatch(Config("fashion_mnist_mlp_pipeline.yaml") +
                                         " --set training.epochs=1 --set training.threads=1",
                                     &run))
      << run.submit.out;
  const v1::Job& job = run.job;
  EXPECT_EQ(run.watch.exit_code, 0) << run.watch.out;
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_EQ(job.attempts_size(), 1);
  const v1::Attempt& a = job.attempts(0);
  EXPECT_EQ(a.world_size(), 2);
  ASSERT_EQ(a.assignments_size(), 2);
  EXPECT_NE(a.assignments(0).worker_id(), a.assignments(1).worker_id());
  // One pipeline reads the whole batch: one process's 938 steps.
  EXPECT_EQ(job.result().steps(), 938);
  // configs/fashion_mnist_mlp.yaml reaches about 0.84 after one epoch in
  // one process (data_parallel_e2e_test asks 0.82 of it on 2 ranks).
  EXPECT_GE(job.result().test_accuracy(), 0.82);
  EXPECT_GT(job.result().train_loss(), 0.0);
  EXPECT_EQ(job.history_size(), 1);
  // Each rank says which stage it runs; the stages' parameters add up to the
  // whole model's, which the result reports.
  const RunResult logs = cluster.Yoke("logs " + run.id);
  int64_t stage_params = 0;
  for (int s = 1; s <= 2; ++s) {
    const std::string said = absl::StrCat("runs stage ", s, " of 2 (layers ");
    const size_t at = logs.out.find(said);
    ASSERT_NE(at, std::string::npos) << logs.out;
    const size_t comma = logs.out.find(", ", at + said.size());
    ASSERT_NE(comma, std::string::npos) << logs.out;
    stage_params += std::atoll(logs.out.c_str() + comma + 2);
  }
  EXPECT_EQ(stage_params, job.result().num_parameters()) << logs.out;
  // Under 1F1B stage 1 of 2 holds at most 2 of the 4 micro-batches, stage 2
  // one, and each says what that measured.
  EXPECT_NE(logs.out.find("(stage 1 of 2) held at most 2 micro-batches in flight"),
            std::string::npos)
      << logs.out;
  EXPECT_NE(logs.out.find("(stage 2 of 2) held at most 1 micro-batches in flight"),
            std::string::npos)
      << logs.out;
  std::printf("%s: 2 stages, test accuracy %.4f, train loss %.4f, %.0f samples/s, %.0fs\n",
              run.id.c_str(), job.result().test_accuracy(), job.result().train_loss(),
              job.result().samples_per_second(), run.seconds);
}

// A stage killed mid-job: the attempt fails naming the stage (not the
// other stage's echo of the broken connection), and the next attempt
// resumes every stage from the last whole-model checkpoint, so each epoch
// is reported once and the job reaches the accuracy of an unbroken run.
TEST(PipelineE2ETest, AKilledStageFailsTheAttemptAndTheJobResumesFromItsCheckpoint) {
  using Clock = std::chrono::steady_clock;
  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  const std::string ckpt = MakeTempDir("yoke_e2e_pipeline_ckpt");
  RunResult s = cluster.Yoke(
      "submit " + Config("fashion_mnist_mlp_pipeline.yaml") +
      " --set training.epochs=2 --set training.threads=1 --set training.log_every_steps=5"
      " --set checkpoint.every_steps=100 --set restart.max_restarts=2 --set checkpoint.dir=" +
      ckpt);
  ASSERT_EQ(s.exit_code, 0) << s.out;
  const std::string id = s.out.substr(0, s.out.find('\n'));
  v1::Job job;
  ASSERT_TRUE(WaitFor([&] { return cluster.GetJob(id, &job) && job.progress().step() >= 350; },
                      std::chrono::seconds(180)))
      << job.DebugString() << cluster.Logs();
  const std::vector<pid_t> trainers = ChildrenOf(cluster.state().worker_pids[1], "yoke-trainer");
  ASSERT_EQ(trainers.size(), 1u) << cluster.Logs();
  ASSERT_EQ(kill(trainers[0], SIGKILL), 0);
  const int64_t step_at_kill = job.progress().step();
  const auto killed = Clock::now();
  ASSERT_TRUE(cluster.WaitForEnd(id, &job, std::chrono::seconds(300)))
      << job.DebugString() << cluster.Logs();
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_GE(job.attempts_size(), 2);
  const std::string& why = job.attempts(0).reason();
  EXPECT_NE(why.find(" of 2) on "), std::string::npos) << why;
  EXPECT_NE(why.find("signal 9"), std::string::npos) << why;
  // The second attempt's stages said where they resumed: at a checkpoint
  // of the 100-step cadence or the first epoch's end (step 938, where a
  // checkpoint is always written), at or before the kill, past step 0.
  const RunResult logs = cluster.Yoke("logs " + id);
  const size_t at = logs.out.find("resumed from ");
  ASSERT_NE(at, std::string::npos) << logs.out;
  const size_t step_at = logs.out.find("): step ", at);
  ASSERT_NE(step_at, std::string::npos) << logs.out.substr(at, 200);
  const int64_t resumed = std::atoll(logs.out.c_str() + step_at + 8);
  EXPECT_GE(resumed, 300) << logs.out.substr(at, 200);
  EXPECT_TRUE(resumed % 100 == 0 || resumed == 938) << resumed;
  // The newest checkpoint the killed attempt wrote: at or after the last
  // step it logged ("last output: ... (global N)", every 5 steps) rounded
  // down to the 100-step cadence (a checkpoint is a collective of every
  // stage, done before any passes its step), and at most a step it reached
  // before its next log line. Not the step this test last saw: progress
  // reaches the coordinator with the workers' heartbeats, and at 1,000 steps
  // a second the trainer was killed 135 steps past the last report.
  const size_t global = why.rfind("(global ");
  ASSERT_NE(global, std::string::npos) << why;
  const int64_t last_logged = std::atoll(why.c_str() + global + 8);
  // (Within one log interval either way: the stage logs every 5 steps, and
  // a step's line may come before its checkpoint.)
  EXPECT_GE(last_logged + 5, step_at_kill) << why;
  EXPECT_LE(resumed, last_logged + 5) << why;
  EXPECT_GE(resumed, (last_logged - 5) / 100 * 100) << why;
  std::vector<int> epochs;
  for (const auto& e : job.history()) epochs.push_back(e.epoch());
  EXPECT_EQ(epochs, std::vector<int>({1, 2})) << "every epoch exactly once";
  EXPECT_EQ(job.result().steps(), 2 * 938);
  EXPECT_GE(job.result().test_accuracy(), 0.82);
  std::printf(
      "%s: stage killed at step %lld, resumed at step %lld; %s; done %.0fs after the kill\n",
      id.c_str(), static_cast<long long>(step_at_kill), static_cast<long long>(resumed),
      why.c_str(), seconds);
  std::error_code ec;
  std::filesystem::remove_all(ckpt, ec);
}

// Model parallelism's reason to exist: a model that needs more memory than
// a worker's --memory-limit (each trainer is held to its share by a memory
// cgroup) fails whole there, out of memory, and trains split into 2 stages
// on 2 such workers, to the test accuracy one unlimited rank reaches
// accumulating the same 4 micro-batches. (The coordinator's estimate cannot
// refuse it at submit: it does not read IDX headers, so it takes the input
// as 1x1x1; coordinator_jobs_test checks the per-stage estimate on
// synthetic shapes.)
TEST(PipelineE2ETest, AModelTooBigForOneWorkerTrainsSplitAcrossTwo) {
#if defined(__SANITIZE_ADDRESS__) || defined(__has_feature)
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
  // Measured under ASan: a stage passed the 640 MiB share too. The bound is
  // the real allocator's, which make test runs with.
  GTEST_SKIP() << "ASan's allocator (redzones, quarantine) adds to every trainer's memory";
#endif
#endif
  // Two dense layers of 25 M parameters each, with gradients and momentum
  // about 290 MiB each. Measured peaks: whole, 830 MiB in one process; the
  // first stage, 528 MiB.
  const std::string job =
      Config("fashion_mnist_mlp_pipeline.yaml") +
      " --set 'model={layers: [flatten, {name: fc1, dense: {units: 32000}}, relu, "
      "{name: fc2, dense: {units: 784}}, relu, {name: logits, dense: {units: 10}}]}'"
      " --set training.epochs=1 --set training.threads=1 --set data.train.num_examples=1024"
      " --set data.test.num_examples=1000";
  // The same batches on one rank, accumulating the 4 micro-batches.
  const std::string whole =
      " --set distribution.pipeline=null --set distribution.workers=1"
      " --set training.accumulation_steps=4 --set training.eval_batch_size=64";
  TestCluster limited(2, "--memory-limit 640MiB");
  ASSERT_TRUE(limited.ok()) << limited.up_output();
  if (limited.Logs().find("trainers run WITHOUT a memory limit") != std::string::npos) {
    // worker/trainer_oom_test.cc fails where a controller exists unused.
    GTEST_SKIP() << "no usable memory cgroup: nothing holds a trainer to its share";
  }
  TestCluster::Watched alone;
  ASSERT_TRUE(limited.SubmitAndWatch(job + whole, &alone)) << alone.submit.out;
  EXPECT_EQ(alone.job.state(), v1::JOB_FAILED);
  EXPECT_NE(alone.job.reason().find("out of memory"), std::string::npos) << alone.job.reason();
  TestCluster::Watched piped;
  ASSERT_TRUE(limited.SubmitAndWatch(job, &piped)) << piped.submit.out;
  ASSERT_EQ(piped.job.state(), v1::JOB_SUCCEEDED) << piped.job.reason() << limited.Logs();

  TestCluster unlimited(1);
  ASSERT_TRUE(unlimited.ok()) << unlimited.up_output();
  TestCluster::Watched one;
  ASSERT_TRUE(unlimited.SubmitAndWatch(job + whole, &one)) << one.submit.out;
  ASSERT_EQ(one.job.state(), v1::JOB_SUCCEEDED) << one.job.reason() << unlimited.Logs();
  EXPECT_EQ(piped.job.result().num_parameters(), one.job.result().num_parameters());
  EXPECT_EQ(piped.job.result().steps(), one.job.result().steps());
  EXPECT_EQ(piped.job.result().test_accuracy(), one.job.result().test_accuracy());
  EXPECT_GT(one.job.result().test_accuracy(), 0.5);
  std::printf(
      "%s: %lld parameters in 2 stages under a 640 MiB limit per worker: test accuracy %.4f, "
      "stage 1 peak %.0f MiB (one unlimited rank: %.4f, peak %.0f MiB), %.0fs\n",
      piped.id.c_str(), static_cast<long long>(piped.job.result().num_parameters()),
      piped.job.result().test_accuracy(), piped.job.result().peak_memory_bytes() / 1048576.0,
      one.job.result().test_accuracy(), one.job.result().peak_memory_bytes() / 1048576.0,
      piped.seconds);
}

}  // namespace
}  // namespace yoke::e2e
