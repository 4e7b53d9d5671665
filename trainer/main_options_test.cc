#include "trainer/main_options.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::worker {
namespace {

using ::testing::ElementsAre;

// Parses `args` as yoke-trainer's flags (the first positional is the job
// file) and builds the options.
absl::StatusOr<TrainerMainOptions> Build(const std::vector<std::string>& args) {
  TrainerArgs a;
  common::FlagParser parser("yoke train", "usage\n");
  DeclareTrainerFlags(&parser, &a);
  auto parsed = parser.Parse(args);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->positional.empty()) a.job_file = parsed->positional[0];
  return BuildTrainerOptions(a);
}

std::string Error(const std::vector<std::string>& args) {
  auto o = Build(args);
  EXPECT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
  return std::string(o.status().message());
}

TEST(TrainerOptionsTest, Defaults) {
  auto o = Build({"job.yaml"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->args.job_file, "job.yaml");
  EXPECT_EQ(o->args.output, "text");
  EXPECT_EQ(o->args.log_level, "warn");
  EXPECT_EQ(o->data_ports, std::nullopt);
  EXPECT_EQ(o->trainer.world_size, 1);
  EXPECT_EQ(o->trainer.first_rank, 0);
  EXPECT_EQ(o->trainer.num_replicas, 1);
  EXPECT_EQ(o->trainer.hostname, "127.0.0.1");
  EXPECT_TRUE(o->trainer.rank_hosts.empty());
  EXPECT_TRUE(o->trainer.spec_validated);
  EXPECT_FALSE(o->local_rendezvous);
}

TEST(TrainerOptionsTest, ThePlacementOfADistributedAttempt) {
  auto o = Build({"--spec-file",
                  "-",
                  "--world-size",
                  "4",
                  "--rank",
                  "2",
                  "--replicas",
                  "2",
                  "--coordinator",
                  "10.0.0.1:7070",
                  "--job-id",
                  "job-1",
                  "--attempt",
                  "3",
                  "--ps-incarnation",
                  "2",
                  "--gloo-hostname",
                  "10.0.0.5",
                  "--rank-hosts",
                  "w-1@a,w-1@a,w-2@b,w-2@b",
                  "--data-ports",
                  "41000-41009",
                  "-o",
                  "events",
                  "--data-root",
                  "/d",
                  "--checkpoint-root",
                  "/c",
                  "--resume-latest",
                  "/ck"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.world_size, 4);
  EXPECT_EQ(o->trainer.first_rank, 2);
  EXPECT_EQ(o->trainer.num_replicas, 2);
  EXPECT_EQ(o->trainer.coordinator, "10.0.0.1:7070");
  EXPECT_EQ(o->trainer.job_id, "job-1");
  EXPECT_EQ(o->trainer.attempt, 3);
  EXPECT_EQ(o->trainer.ps_incarnation, 2);
  EXPECT_EQ(o->trainer.hostname, "10.0.0.5");
  EXPECT_THAT(o->trainer.rank_hosts, ElementsAre("w-1@a", "w-1@a", "w-2@b", "w-2@b"));
  ASSERT_TRUE(o->data_ports.has_value());
  EXPECT_EQ(o->data_ports->ToString(), "41000-41009");
  EXPECT_FALSE(o->local_rendezvous);
  EXPECT_EQ(o->args.output, "events");
  EXPECT_THAT(o->args.data_roots, ElementsAre("/d"));
  EXPECT_THAT(o->args.checkpoint_roots, ElementsAre("/c"));
}

TEST(TrainerOptionsTest, AllRanksHereRendezvousInMemory) {
  auto o = Build({"job.yaml", "--world-size", "2", "--replicas", "2"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->local_rendezvous);
}

TEST(TrainerOptionsTest, EachErrorInItsOrder) {
  EXPECT_EQ(Error({"job.yaml", "--output", "xml"}),
            "--output must be text, json or events, got 'xml'");
  EXPECT_EQ(Error({"job.yaml", "--world-size", "0"}), "--world-size: must be >= 1, got 0");
  EXPECT_EQ(Error({"job.yaml", "--replicas", "0"}), "--replicas: must be >= 1, got 0");
  EXPECT_EQ(Error({"job.yaml", "--rank", "3", "--world-size", "2"}),
            "--rank: ranks 3..3 (--rank, --replicas 1) must be in [0, 2)");
  EXPECT_THAT(Error({"job.yaml", "--data-ports", "bogus"}),
              ::testing::StartsWith("--data-ports: "));
  EXPECT_EQ(Error({"job.yaml", "--world-size", "2"}),
            "--world-size 2 with ranks in other processes needs --coordinator HOST:PORT and "
            "--job-id to rendezvous");
  EXPECT_EQ(Error({"job.yaml", "--world-size", "2", "--coordinator", "a:1"}),
            "--world-size 2 with ranks in other processes needs --coordinator HOST:PORT and "
            "--job-id to rendezvous");
  EXPECT_EQ(Error({"job.yaml", "--spec-file", "s.bin"}),
            "give a job file ('job.yaml') or --spec-file ('s.bin'), not both");
  EXPECT_EQ(Error({"--spec-file", "s.bin", "--set", "a=1"}),
            "--set needs a YAML job file; --spec-file takes the spec as it is");
  EXPECT_EQ(Error({"job.yaml", "--resume", "a", "--resume-latest", "b"}),
            "give --resume or --resume-latest, not both");
  // The first of several errors wins.
  EXPECT_EQ(Error({"a.yaml", "--output", "xml", "--world-size", "0"}),
            "--output must be text, json or events, got 'xml'");
}

TEST(TrainerOptionsTest, NoJobAtAllAsksForTheUsage) {
  auto o = Build({});
  EXPECT_TRUE(IsNoJob(o.status())) << o.status();
  o = Build({"--resume-latest", "dir"});
  EXPECT_TRUE(IsNoJob(o.status())) << o.status();
  // Errors checked before it come first.
  o = Build({"--world-size", "0"});
  EXPECT_FALSE(IsNoJob(o.status()));
  EXPECT_FALSE(IsNoJob(absl::InvalidArgumentError("no job file, --spec-file or --resume")));
  // A checkpoint alone is a job.
  o = Build({"--resume", "ck.yoke"});
  EXPECT_TRUE(o.ok()) << o.status();
}

}  // namespace
}  // namespace yoke::worker
