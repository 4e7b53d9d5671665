// End to end: ResNet-50 at 224x224 from a JPEG image folder, through the
// daemons on a `yoke up` cluster of two workers (one rank each, one thread),
// with a checkpoint every 2 steps. One trainer is killed with SIGKILL once the
// step-2 checkpoint is on disk; the job's next attempt resumes from the
// newest checkpoint and the job SUCCEEDS with every step done once.
//
// The folder is the first 100 training and 50 test images of Fashion-MNIST
// (every class in both) written out by yoke-make-image-folder (JPEG,
// quality 95): 28x28 grayscale images decoded as RGB and resized to 224x224,
// the ImageNet input ResNet-50 was built for (7x7/2 stem, max pool).
// A step of one image per rank takes about a second on one core.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "engine/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

constexpr char kFashion[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
constexpr int kSteps = 8;

// The job: ResNet-50 at 224x224 on the JPEG folder under `dir`/images, two
// workers, kSteps steps of one image per rank, a checkpoint into `ckpt` every
// 2 steps, one restart allowed.
std::string ResNet50Spec(const std::string& dir, const std::string& ckpt) {
  return "name: resnet50-image-folder\n"
         "model: {zoo: resnet50}\n"
         "data:\n"
         "  train: {format: image_folder, root: " +
         dir +
         "/images/jpeg/train,"
         " image_size: [224, 224], channels: 3}\n"
         "  test: {format: image_folder, root: " +
         dir +
         "/images/jpeg/test,"
         " image_size: [224, 224], channels: 3}\n"
         "  transform: {divisor: 255}\n"
         "training:\n"
         "  epochs: 1\n"
         "  batch_size: 2\n"
         "  max_steps: " +
         std::to_string(kSteps) +
         "\n"
         "  threads: 1\n"
         "  log_every_steps: 1\n"
         "  eval_batch_size: 5\n"
         "  optimizer: {type: sgd, lr: 0.01, momentum: 0.9}\n"
         "distribution: {workers: 2}\n"
         "checkpoint: {dir: " +
         ckpt +
         ", every_steps: 2, keep: 10}\n"
         "restart: {max_restarts: 1}\n";
}

// The pid of the cluster's rank-1 trainer, or 0 when there is none.
pid_t Rank1Trainer(const TestCluster& cluster) {
  pid_t victim = 0;
  for (int w : cluster.state().worker_pids) {
    for (pid_t t : ChildrenOf(w, "yoke-trainer")) {
      if (CommandLine(t).find("--rank 1") != std::string::npos) victim = t;
    }
  }
  return victim;
}

// The final checkpoint in `ckpt` holds the job's step and the class names.
void ExpectTheFinalCheckpoint(const std::string& ckpt) {
  auto last = engine::ReadCheckpoint(engine::CheckpointPath(ckpt, kSteps));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->header.step(), kSteps);
  ASSERT_EQ(last->header.class_names_size(), 10);
  EXPECT_EQ(last->header.class_names(0), "0_t-shirt_top");
  EXPECT_EQ(last->header.class_names(9), "9_ankle_boot");
}

TEST(ResNet50ImageFolderE2ETest, TwoWorkersCheckpointAndResumeAfterAKill) {
  if (!std::filesystem::exists(kFashion)) {
    GTEST_SKIP() << kFashion << " is missing (package dataset-fashion-mnist)";
  }
  const std::string dir = MakeTempDir("yoke_e2e_resnet50");
  RunResult made = Sh(
      BinDir() + "/yoke-make-image-folder " + dir + "/images --train 100 --test 50 --formats jpeg",
      true);
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const std::string ckpt = dir + "/ckpt";

  TestCluster cluster(2);
  ASSERT_TRUE(cluster.ok()) << cluster.up_output();
  const std::string spec = ResNet50Spec(dir, ckpt);
  const std::string spec_path = dir + "/job.yaml";
  {
    std::FILE* f = std::fopen(spec_path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(spec.c_str(), f);
    std::fclose(f);
  }
  RunResult s = cluster.Yoke("submit " + spec_path);
  ASSERT_EQ(s.exit_code, 0) << s.out;
  const std::string id = s.out.substr(0, s.out.find('\n'));

  // Once the step-2 checkpoint is on disk (written whole, then renamed into
  // place), kill the rank-1 trainer: the worker without the checkpoint duty.
  v1::Job job;
  const std::string first = engine::CheckpointPath(ckpt, 2);
  ASSERT_TRUE(WaitFor(
      [&] {
        return std::filesystem::exists(first) ||
               (cluster.GetJob(id, &job) && job.state() == v1::JOB_FAILED);
      },
      std::chrono::seconds(600)))
      << job.DebugString() << cluster.Logs();
  ASSERT_TRUE(cluster.GetJob(id, &job));
  ASSERT_EQ(job.state(), v1::JOB_RUNNING) << job.DebugString();
  const pid_t victim = Rank1Trainer(cluster);
  ASSERT_GT(victim, 0) << "no rank-1 trainer found" << cluster.Logs();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const int64_t step_at_kill = job.progress().step();

  // The next attempt resumes from a checkpoint: its first reported step is
  // past 2 (a fresh start would report step 1). The job keeps the last
  // attempt's progress until the new one reports its own.
  ASSERT_TRUE(WaitFor(
      [&] {
        return cluster.GetJob(id, &job) && job.attempts_size() >= 2 &&
               job.state() == v1::JOB_RUNNING;
      },
      std::chrono::seconds(300)))
      << job.DebugString() << cluster.Logs();
  const int64_t stale = job.progress().step();
  int64_t resumed_at = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        if (!cluster.GetJob(id, &job)) return false;
        if (job.state() == v1::JOB_RUNNING && job.progress().step() != stale) {
          resumed_at = job.progress().step();
        }
        return resumed_at > 0 || job.state() == v1::JOB_SUCCEEDED || job.state() == v1::JOB_FAILED;
      },
      std::chrono::seconds(600)))
      << job.DebugString() << cluster.Logs();
  if (resumed_at > 0) {
    EXPECT_GT(resumed_at, 2) << "the second attempt started over";
  }

  ASSERT_TRUE(cluster.WaitForEnd(id, &job, std::chrono::seconds(900)))
      << job.DebugString() << cluster.Logs();
  ASSERT_EQ(job.state(), v1::JOB_SUCCEEDED) << job.reason() << cluster.Logs();
  ASSERT_EQ(job.attempts_size(), 2) << job.DebugString();
  // The first exit the coordinator hears of: rank 1's own ("killed by signal
  // 9"), or rank 0's when it saw its local peer die first (both workers share
  // the host, so they sum through shared memory): "local rank 1 (pid N) died".
  EXPECT_TRUE(
      std::regex_search(job.attempts(0).reason(),
                        std::regex("killed by signal 9|local rank 1 \\(pid [0-9]+\\) died")))
      << job.attempts(0).reason();
  EXPECT_EQ(job.attempts(1).world_size(), 2);
  EXPECT_EQ(job.result().steps(), kSteps);
  EXPECT_EQ(job.result().num_parameters(), 23528522);  // the zoo test's ResNet-50 with 10 classes
  EXPECT_GT(job.result().test_loss(), 0);

  ASSERT_NO_FATAL_FAILURE(ExpectTheFinalCheckpoint(ckpt));
  std::printf(
      "ResNet-50 224x224, 2 workers: killed rank 1 at step %lld, resumed at step %lld, "
      "%d steps, %.2f samples/s\n",
      static_cast<long long>(step_at_kill), static_cast<long long>(resumed_at), kSteps,
      job.result().samples_per_second());
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace yoke::e2e
