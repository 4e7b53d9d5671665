#include "jobspec/ps_check.h"

#include <set>
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
  strategy: parameter_server
  parameter_servers: 2
  consistency: bounded
  max_staleness: 3
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

TEST(PsCheckTest, TheYamlFormParsesAndAGoodJobHasNoErrors) {
  const v1::JobSpec spec = Load({});
  EXPECT_TRUE(IsParameterServerJob(spec));
  EXPECT_EQ(ParameterServerTasks(spec), 2);
  EXPECT_EQ(spec.distribution().max_staleness(), 3);
  EXPECT_THAT(ParameterServerSpecErrors(spec), IsEmpty());
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  for (const char* c : {"sync", "async"}) {
    EXPECT_THAT(ParameterServerSpecErrors(Load({std::string("distribution.consistency=") + c,
                                                "distribution.max_staleness=0"})),
                IsEmpty())
        << c;
  }
  // Checkpoints are a PS job's as any job's.
  const v1::JobSpec ckpt = Load({"checkpoint.dir=/tmp/x", "checkpoint.every_steps=100"});
  EXPECT_THAT(ParameterServerSpecErrors(ckpt), IsEmpty());
  EXPECT_TRUE(ValidateJobSpec(ckpt).ok()) << ValidateJobSpec(ckpt);
  // An allreduce job has no PS tasks, whatever else it says.
  const v1::JobSpec plain =
      Load({"distribution.strategy=allreduce", "distribution.parameter_servers=0",
            "distribution.consistency=", "distribution.max_staleness=0"});
  EXPECT_FALSE(IsParameterServerJob(plain));
  EXPECT_EQ(ParameterServerTasks(plain), 0);
  EXPECT_THAT(ParameterServerSpecErrors(plain), IsEmpty());
}

TEST(PsCheckTest, OnlyAsyncAndBoundedJobsRestartAReplicaAlone) {
  EXPECT_TRUE(RestartsReplicasAlone(Load({})));  // bounded
  EXPECT_TRUE(RestartsReplicasAlone(
      Load({"distribution.consistency=async", "distribution.max_staleness=0"})));
  EXPECT_FALSE(RestartsReplicasAlone(
      Load({"distribution.consistency=sync", "distribution.max_staleness=0"})));
  EXPECT_FALSE(
      RestartsReplicasAlone(Load({"distribution.consistency=", "distribution.max_staleness=0"})))
      << "no consistency is sync";
  EXPECT_TRUE(RestartsReplicasAlone(
      Load({"training.early_stopping.monitor=validation_loss", "data.validation_split=0.1"})))
      << "early stopping's decision needs no replicas' group";
  EXPECT_FALSE(RestartsReplicasAlone(
      Load({"distribution.strategy=allreduce", "distribution.parameter_servers=0",
            "distribution.consistency=async", "distribution.max_staleness=0"})))
      << "an allreduce job restarts whole attempts";
}

TEST(PsCheckTest, EachBadFieldIsNamed) {
  const struct {
    std::vector<std::string> overrides;
    std::string want;
  } cases[] = {
      {{"distribution.strategy=ps"}, "distribution.strategy: unknown strategy 'ps'"},
      {{"distribution.strategy=allreduce"}, "distribution.parameter_servers: only with"},
      {{"distribution.parameter_servers=0"}, "distribution.parameter_servers: must be in [1, 64]"},
      {{"distribution.parameter_servers=65"}, "got 65"},
      {{"distribution.consistency=eventual"}, "unknown consistency 'eventual'"},
      {{"distribution.max_staleness=-1"}, "distribution.max_staleness: must be in [0, 1000]"},
      {{"distribution.consistency=sync"}, "counts only with distribution.consistency bounded"},
      {{"distribution.pipeline.stages=2"}, "distribution.pipeline: not with distribution.strategy"},
      {{"distribution.device=cuda"}, "distribution.device: 'cpu' only"},
      {{"distribution.sync_batch_norm=true"}, "distribution.sync_batch_norm: not supported"},
      {{"distribution.gradient_compression=fp16"}, "distribution.gradient_compression: only"},
      {{"training.clip_grad_norm=1"}, "training.clip_grad_norm: not supported"},
  };
  for (const auto& c : cases) {
    const v1::JobSpec spec = Load(c.overrides);
    EXPECT_THAT(Joined(ParameterServerSpecErrors(spec)), HasSubstr(c.want)) << c.overrides[0];
    // Validation refuses the spec with the same words.
    const absl::Status v = ValidateJobSpec(spec);
    EXPECT_FALSE(v.ok()) << c.overrides[0];
    EXPECT_THAT(std::string(v.message()), HasSubstr(c.want)) << c.overrides[0];
  }
}

// Every layout: each share's ranks are contiguous and cover the job; the
// replicas get the data-parallel ranks 0.. once each, in share order, and
// the PS tasks 0.. once each, task k on share k % workers.
TEST(PsCheckTest, RolesAndSharesAgreeForEveryLayout) {
  for (int workers = 1; workers <= 4; ++workers) {
    for (int per = 1; per <= 3; ++per) {
      for (int ps = 0; ps <= 6; ++ps) {
        const std::vector<PsShare> shares = PsShares(workers, per, ps);
        ASSERT_EQ(static_cast<int>(shares.size()), workers);
        std::set<int> replicas, tasks;
        int next = 0;
        for (int i = 0; i < workers; ++i) {
          EXPECT_EQ(shares[i].first_rank, next);
          for (int r = shares[i].first_rank; r < shares[i].first_rank + shares[i].num_ranks; ++r) {
            const RankRole role = RoleOfRank(r, workers, per, ps);
            if (role.ps) {
              EXPECT_EQ(role.index % workers, i) << "PS task " << role.index;
              EXPECT_TRUE(tasks.insert(role.index).second);
            } else {
              EXPECT_EQ(role.index, static_cast<int>(replicas.size()));  // in order
              EXPECT_EQ(role.index / per, i);
              replicas.insert(role.index);
            }
          }
          next += shares[i].num_ranks;
        }
        EXPECT_EQ(next, workers * per + ps);
        EXPECT_EQ(static_cast<int>(replicas.size()), workers * per);
        ASSERT_EQ(static_cast<int>(tasks.size()), ps);
        if (ps > 0) {
          EXPECT_EQ(*tasks.rbegin(), ps - 1);
        }
      }
    }
  }
  // 2 workers, 1 replica each, 3 PS tasks: worker 0 runs PS 0 and 2.
  EXPECT_EQ(PsShares(2, 1, 3)[0].num_ranks, 3);
  EXPECT_EQ(RoleOfRank(2, 2, 1, 3).index, 2);
  EXPECT_TRUE(RoleOfRank(4, 2, 1, 3).ps);
  EXPECT_EQ(RoleOfRank(4, 2, 1, 3).index, 1);
}

}  // namespace
}  // namespace yoke::common
