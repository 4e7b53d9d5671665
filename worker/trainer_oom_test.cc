// yoke-trainer as the worker daemon runs it, on a job whose activations cannot
// be allocated: the trainer must fail the attempt with exit 1 and an
// "out of memory" reason naming the layer, not abort (SIGABRT, no reason).
// And on a job whose data needs more than its memory share: the attempt
// fails as out of memory, naming the share, with the trainer alone killed.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/memory_cgroup.h"
#include "worker/trainer_launcher.h"

namespace yoke::worker {
namespace {

using ::testing::HasSubstr;

std::string Overcommit() {
  std::string mode;
  std::ifstream("/proc/sys/vm/overcommit_memory") >> mode;
  return mode;
}

TEST(TrainerOomTest, ActivationsThatDoNotFitExitOneWithTheLayer) {
  // The first layer's output is (4096, 28, 28, 262144) f32, 3.4 TB: the
  // kernel refuses it at once unless it overcommits blindly (mode 1), where
  // the allocation would succeed and the step would really use the memory.
  if (Overcommit() == "1")
    GTEST_SKIP() << "vm.overcommit_memory is 1: a 3.4 TB allocation "
                    "would succeed, and the test would exhaust memory";
  const common::TempDir tmp("yoke_trainer_oom");  // removed with its files at the end
  const std::string dir = tmp.path();
  const char* source_dir = std::getenv("YOKE_SOURCE_DIR");
  auto spec = common::LoadJobSpecFile(
      std::string(source_dir ? source_dir : ".") + "/configs/fashion_mnist_mlp.yaml",
      {"model.layers=[{name: wide, conv2d: {filters: 262144, kernel: 1}}, global_avg_pool, "
       "{dense: {units: 10}}]",
       "data.train.num_examples=4096", "data.test.num_examples=100", "training.batch_size=4096",
       "training.epochs=1"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string path = dir + "/job.yaml";
  std::ofstream(path) << common::JobSpecToYaml(*spec);

  TrainerLauncherOptions o;
  // The real trainer, built next to this test.
  o.binary = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "yoke-trainer";
  o.args = {path, "--output", "events"};
  o.work_dir = dir;
  auto p = TrainerLauncher::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WaitForExit(absl::Seconds(120)));
  TrainerState s = (*p)->State();
  std::vector<std::string> logs;
  for (const auto& l : (*p)->LogsSince(0, 1000)) logs.push_back(l.text);
  EXPECT_EQ(s.exit_code, 1) << s.reason << "\n" << absl::StrJoin(logs, "\n");
  const int64_t bytes = int64_t{4096} * 28 * 28 * 262144 * 4;
  EXPECT_THAT(s.reason,
              HasSubstr(absl::StrCat("out of memory: ", bytes, " bytes for layer wide (")));
  EXPECT_THAT(s.reason, HasSubstr(" bytes in use)"));
  EXPECT_EQ(s.reason, s.error);  // the trainer's own {"error"}, not a signal
  EXPECT_FALSE(s.has_result);
}

// Whether this machine has a memory controller the worker must be able to
// use (see worker/memory_cgroup_test.cc), from the usual mount points.
bool MemoryControllerExpected() {
  if (::geteuid() != 0) return false;
  if (std::filesystem::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) return true;
  for (const char* f :
       {"/sys/fs/cgroup/cgroup.controllers", "/sys/fs/cgroup/unified/cgroup.controllers"}) {
    std::string controllers;
    std::getline(std::ifstream(f), controllers);
    if (controllers.find("memory") != std::string::npos) return true;
  }
  return false;
}

TEST(TrainerOomTest, DataPastTheMemoryShareIsKilledAndReportedAsOutOfMemory) {
  auto cgroups = MemoryCgroups::Open();
  if (!cgroups.ok()) {
    ASSERT_FALSE(MemoryControllerExpected())
        << "this machine has a memory controller, but the worker cannot use it: "
        << cgroups.status();
    GTEST_SKIP() << "no usable memory controller: " << cgroups.status();
  }
  const common::TempDir tmp("yoke_trainer_share");  // removed with its files at the end
  const std::string dir = tmp.path();
  // 10^8 synthetic examples: the shuffle order alone is 800 MB (8 bytes an
  // example), past a 128 MiB share within the first second; unlimited,
  // the job would train for minutes.
  const std::string path = dir + "/job.yaml";
  std::ofstream(path) << "name: share-hog\nmodel: {layers: [flatten, {dense: {units: 2}}]}\n"
                         "data: {train: {format: synthetic, shape: [2], num_classes: 2, "
                         "num_examples: 100000000, seed: 1}}\n"
                         "training: {epochs: 1, batch_size: 4, seed: 1, "
                         "optimizer: {type: sgd, lr: 0.1}}\n";
  TrainerLauncherOptions o;
  o.binary = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "yoke-trainer";
  o.args = {path, "--output", "events"};
  o.work_dir = dir;
  o.memory_cgroups = cgroups->get();
  o.memory_limit_bytes = int64_t{128} << 20;
  const absl::Time start = absl::Now();
  auto p = TrainerLauncher::Start(o);
  ASSERT_TRUE(p.ok()) << p.status();
  if (!(*p)->WaitForExit(absl::Seconds(60))) {
    (*p)->Stop(absl::ZeroDuration());
    FAIL() << "the trainer ran 60 s past its 128 MiB share: the limit was not applied";
  }
  const absl::Duration took = absl::Now() - start;
  const TrainerState s = (*p)->State();
  std::vector<std::string> logs;
  for (const auto& l : (*p)->LogsSince(0, 1000)) logs.push_back(l.text);
  SCOPED_TRACE(absl::StrCat("exit ", s.exit_code, ": ", s.reason, "\n", absl::StrJoin(logs, "\n")));
  EXPECT_TRUE(s.out_of_memory);
  EXPECT_THAT(s.reason, ::testing::StartsWith("out of memory: "));
  EXPECT_THAT(s.reason, HasSubstr("134217728 bytes (128.0 MiB)"));
  EXPECT_FALSE(s.has_result);
  EXPECT_LT(took, absl::Seconds(20));
  // The kernel held this trainer to 128 MiB, whichever way it ended.
  EXPECT_EQ(s.memory.limit_bytes, int64_t{128} << 20);
  EXPECT_LE(s.memory.peak_bytes, int64_t{128} << 20);
  if (s.exit_code == 128 + SIGKILL) {
    // The cgroup's OOM killer, after the trainer's memory filled its share.
    EXPECT_GE(s.memory.oom_kills, 1);
    EXPECT_GT(s.memory.peak_bytes, int64_t{96} << 20);
  } else {
    // Strict overcommit (vm.overcommit_memory 2) may refuse the 800 MB
    // outright: the trainer then aborts on std::bad_alloc, but was charged
    // to its cgroup all along.
    EXPECT_EQ(s.exit_code, 128 + SIGABRT) << "vm.overcommit_memory " << Overcommit();
    EXPECT_GT(s.memory.peak_bytes, int64_t{1} << 20);
  }
  EXPECT_TRUE(s.cgroup_removed);
  EXPECT_FALSE(std::filesystem::exists(s.memory_cgroup)) << s.memory_cgroup;
}

}  // namespace
}  // namespace yoke::worker
