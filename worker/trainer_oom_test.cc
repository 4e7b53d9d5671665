// yoke-trainer as the worker daemon runs it, on a job whose activations cannot
// be allocated: the trainer must fail the attempt with exit 1 and an
// "out of memory" reason naming the layer, not abort (SIGABRT, no reason).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
  char tmpl[] = "/tmp/yoke_trainer_oom_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
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

}  // namespace
}  // namespace yoke::worker
