#include "jobspec/pipeline_check.h"

#include <string>
#include <vector>

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/job_validate.h"

namespace yoke::common {
namespace {

using testing::HasSubstr;
using testing::IsEmpty;

// Two workers of two ranks: a 2-stage pipeline on them makes 2 pipelines.
const char kJob[] = R"(
model: {zoo: mlp}
data:
  train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, num_examples: 100}
training:
  epochs: 1
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
distribution:
  workers: 2
  devices_per_worker: 2
  pipeline: {stages: 2, micro_batches: 4, schedule: 1f1b}
)";

v1::JobSpec Load(const std::vector<std::string>& overrides) {
  auto s = LoadJobSpecString(kJob, overrides, "test.yaml");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : v1::JobSpec();
}

std::string Joined(const std::vector<std::string>& errors) {
  std::string all;
  for (const std::string& e : errors) all += e + "\n";
  return all;
}

TEST(PipelineCheckTest, TheYamlFormParsesAndAGoodPipelineHasNoErrors) {
  const v1::JobSpec spec = Load({});
  ASSERT_TRUE(spec.distribution().has_pipeline());
  EXPECT_EQ(spec.distribution().pipeline().stages(), 2);
  EXPECT_EQ(spec.distribution().pipeline().schedule(), "1f1b");
  EXPECT_THAT(PipelineSpecErrors(spec), IsEmpty());
  EXPECT_THAT(PipelineSpecErrors(Load({"distribution.pipeline.schedule=gpipe",
                                       "distribution.pipeline.boundaries=[dense_3]"})),
              IsEmpty());
  // Without distribution.pipeline nothing applies.
  EXPECT_THAT(PipelineSpecErrors(Load({"distribution.pipeline=null"})), IsEmpty());
}

TEST(PipelineCheckTest, ReplicasAreThePipelinesAndMicroBatchesDefaultToFourPerStage) {
  EXPECT_EQ(DataParallelReplicas(Load({})), 2);
  EXPECT_EQ(DataParallelReplicas(Load({"distribution.pipeline.stages=4"})), 1);
  EXPECT_EQ(DataParallelReplicas(Load({"distribution.pipeline=null"})), 4);
  EXPECT_EQ(PipelineMicroBatches(Load({}).distribution().pipeline()), 4);
  EXPECT_EQ(PipelineMicroBatches(
                Load({"distribution.pipeline.micro_batches=0", "distribution.pipeline.stages=4"})
                    .distribution()
                    .pipeline()),
            16);
}

struct Case {
  std::vector<std::string> overrides;
  std::string expected;
};

class PipelineRejects : public testing::TestWithParam<Case> {};

TEST_P(PipelineRejects, NamesTheField) {
  const std::string errors = Joined(PipelineSpecErrors(Load(GetParam().overrides)));
  EXPECT_THAT(errors, HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Rules, PipelineRejects,
    testing::Values(
        Case{{"distribution.pipeline.stages=1"},
             "distribution.pipeline.stages: must be in [2, 64], got 1 (one stage holds"},
        Case{{"distribution.pipeline.stages=65"}, "stages: must be in [2, 64], got 65"},
        Case{{"distribution.pipeline.micro_batches=-1"},
             "distribution.pipeline.micro_batches: must be in [1, 1024] (0: 4 x stages), got -1"},
        Case{{"distribution.pipeline.micro_batches=1025"}, "got 1025"},
        Case{{"distribution.pipeline.schedule=zb"},
             "distribution.pipeline.schedule: unknown schedule 'zb' (known: 1f1b, gpipe)"},
        Case{{"distribution.pipeline.boundaries=[a, b]"},
             "distribution.pipeline.boundaries: one layer name per stage after the first (1 for 2 "
             "stages), got 2"},
        Case{{"distribution.pipeline.stages=3", "distribution.pipeline.boundaries=[a, a]"},
             "distribution.pipeline.boundaries[1]: 'a' is named twice"},
        Case{{"distribution.pipeline.boundaries=['']"},
             "distribution.pipeline.boundaries[0]: empty layer name"},
        Case{{"distribution.pipeline.stages=3"},
             "distribution.pipeline.stages: the job's 4 ranks (distribution.workers x "
             "devices_per_worker) must be a multiple of the stages (3)"},
        Case{{"distribution.device=cuda"},
             "distribution.pipeline: runs on distribution.device "
             "'cpu' only for now"},
        Case{{"training.accumulation_steps=2"},
             "training.accumulation_steps: a pipeline accumulates over its micro-batches"},
        Case{{"distribution.sync_batch_norm=true"},
             "distribution.sync_batch_norm: not supported with distribution.pipeline"},
        Case{{"training.recompute=true"}, "training.recompute: not with distribution.pipeline"},
        Case{{"training.recompute_batch_norm=true"},
             "training.recompute_batch_norm: not with distribution.pipeline"}));

TEST(PipelineCheckTest, ValidationCountsPipelinesAndReportsTheRules) {
  // 4 ranks in 4 stages make one pipeline, so a batch of 2 is enough: the
  // batch check counts pipelines, not ranks.
  EXPECT_TRUE(
      ValidateJobSpec(Load({"distribution.pipeline.stages=4", "training.batch_size=2"})).ok());
  // Its checkpoints hold the whole model (trainer_pipeline_checkpoint.cc).
  const absl::Status ckpt = ValidateJobSpec(
      Load({"checkpoint.dir=/tmp/c", "checkpoint.every_steps=5", "checkpoint.keep_best=true",
            "training.early_stopping.monitor=validation_loss", "data.validation_split=0.1",
            "training.early_stopping.patience=2"}));
  EXPECT_TRUE(ckpt.ok()) << ckpt;
  EXPECT_THAT(
      ValidateJobSpec(Load({"distribution.pipeline=null", "training.batch_size=2"})).message(),
      HasSubstr("training.batch_size: the global batch (2) must be at least the number "
                "of replicas (4"));
  // Every pipeline rule reaches the user through validation.
  EXPECT_THAT(ValidateJobSpec(Load({"distribution.pipeline.schedule=zb"})).message(),
              HasSubstr("unknown schedule 'zb'"));
}

}  // namespace
}  // namespace yoke::common
