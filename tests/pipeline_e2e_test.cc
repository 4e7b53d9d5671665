// End to end, a pipeline job (configs/fashion_mnist_mlp_pipeline.yaml) on
// `yoke up --workers 2`: each worker's trainer runs one stage, the stages
// bootstrap their Gloo pairs through the coordinator's rendezvous, and the
// job trains one epoch to the accuracy one process reaches, reported by
// global rank 0 (stage 0, which computes neither the loss nor the logits).
#include <cstdio>
#include <cstdlib>

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
  std::printf("%s: 2 stages, test accuracy %.4f, train loss %.4f, %.0f samples/s, %.0fs\n",
              run.id.c_str(), job.result().test_accuracy(), job.result().train_loss(),
              job.result().samples_per_second(), run.seconds);
}

}  // namespace
}  // namespace yoke::e2e
