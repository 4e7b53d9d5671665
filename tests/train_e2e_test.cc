// End to end: the real `yoke train` binary on the real Fashion-MNIST data, as
// a child process, reading its `--output json` result line.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/metrics.pb.h"

namespace yoke::e2e {
namespace {

std::string BinDir() {
  if (const char* d = std::getenv("YOKE_BIN_DIR")) return d;
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  buf[n > 0 ? n : 0] = '\0';
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

std::string SourceDir() {
  const char* d = std::getenv("YOKE_SOURCE_DIR");
  return d ? d : ".";
}

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
};

// Runs `yoke <args>` with stderr discarded (or merged when merge_stderr).
RunResult Yoke(const std::string& args, bool merge_stderr = false) {
  std::string cmd = BinDir() + "/yoke " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string LastLine(const std::string& s) {
  size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  size_t begin = s.rfind('\n', end);
  return s.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin + 1));
}

// The MLP recipe, one epoch on the full 60,000 training images.
TEST(TrainE2ETest, MlpOneEpochReachesAccuracy) {
  RunResult r = Yoke("train " + SourceDir() +
                     "/configs/fashion_mnist_mlp.yaml --set training.epochs=1 --output json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  v1::TrainResult result;
  auto s = google::protobuf::util::JsonStringToMessage(LastLine(r.out), &result);
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << r.out;
  EXPECT_EQ(result.epochs(), 1);
  EXPECT_EQ(result.steps(), 938);  // ceil(60000 / 64): the last partial batch is kept
  EXPECT_GE(result.test_accuracy(), 0.82);
  EXPECT_GT(result.samples_per_second(), 0);
  EXPECT_GT(result.peak_memory_bytes(), 0);
  std::printf("MLP 1 epoch: test accuracy %.4f, %.0f samples/s\n", result.test_accuracy(),
              result.samples_per_second());
}

// The CIFAR ResNet-20 recipe, cut to 120 steps of 64 and a 2,000-image test
// subset (about a minute on 2 cores): batch norm, residual joins and the
// cosine schedule must train from chance (loss ln 10 = 2.30, accuracy 0.10)
// to well above it. Here it reaches about 0.84; the full recipe's run is in
// bench/results.
TEST(TrainE2ETest, ResNet20ShortRunLowersTheLossAndBeatsChance) {
  RunResult r = Yoke("train " + SourceDir() +
                     "/configs/fashion_mnist_resnet20.yaml --set training.max_steps=120"
                     " --set training.batch_size=64 --set training.optimizer.lr=0.05"
                     " --set training.schedule.warmup_steps=20 --set data.test.num_examples=2000"
                     " --set data.transform.random_crop_padding=0"
                     " --set data.transform.horizontal_flip=false --output json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  v1::TrainResult result;
  auto s = google::protobuf::util::JsonStringToMessage(LastLine(r.out), &result);
  ASSERT_TRUE(s.ok()) << s.ToString() << "\n" << r.out;
  EXPECT_EQ(result.steps(), 120);
  EXPECT_EQ(result.num_parameters(), 272186);  // 272,474 on 3 channels, less 2 x 144 stem weights
  EXPECT_LT(result.train_loss(), 0.5 * std::log(10.0));
  EXPECT_GE(result.test_accuracy(), 0.75);
  std::printf("ResNet-20, 120 steps: train loss %.4f, test accuracy %.4f, %.0f samples/s\n",
              result.train_loss(), result.test_accuracy(), result.samples_per_second());
}

TEST(TrainE2ETest, BadInputExitsNonZeroWithAMessage) {
  std::string cfg = SourceDir() + "/configs/fashion_mnist_mlp.yaml";
  RunResult r = Yoke("train " + cfg + " --set training.batch_size=-64", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("training.batch_size: must be > 0, got -64"), std::string::npos) << r.out;

  r = Yoke("train " + cfg + " --set data.train.images=/nonexistent/x.gz", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("/nonexistent/x.gz"), std::string::npos) << r.out;

  // A corrupt IDX header: exits with a message naming the file, no crash.
  char tmpl[] = "/tmp/yoke_e2e_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string bad = dir + "/bad-images-idx3-ubyte";
  FILE* f = fopen(bad.c_str(), "wb");
  const unsigned char hdr[] = {0, 0, 8, 3, 0, 0, 0xea, 0x60, 0, 0, 0, 28, 0, 0, 0, 28, 1, 2, 3};
  fwrite(hdr, 1, sizeof(hdr), f);
  fclose(f);
  r = Yoke("train " + cfg + " --set data.train.images=" + bad, true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find(bad), std::string::npos) << r.out;

  r = Yoke("train /nonexistent/job.yaml", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("/nonexistent/job.yaml"), std::string::npos) << r.out;

  r = Yoke("train " + cfg + " --set training.optimzer.lr=1", true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("did you mean 'optimizer'"), std::string::npos) << r.out;
}

// Files a hostile or careless user could name: each is refused at once with
// a message naming it, and no file's bytes appear in the message.
TEST(TrainE2ETest, HostileFilesAreRefusedAtOnce) {
  const std::string cfg = SourceDir() + "/configs/fashion_mnist_mlp.yaml";
  char tmpl[] = "/tmp/yoke_e2e_files_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string fifo = dir + "/job.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& args : {std::string("/dev/zero"), fifo, dir}) {
    RunResult r = Yoke("train " + args, true);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("must be a regular file"), std::string::npos) << r.out;
  }
  RunResult r = Yoke("train --resume /dev/zero", true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("is not a regular file"), std::string::npos) << r.out;
  r = Yoke("train --resume " + dir, true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--resume: no checkpoint in " + dir), std::string::npos) << r.out;

  // YAML over 8 MiB, or nested deeper than 64 levels, is refused unparsed.
  const std::string big = dir + "/big.yaml";
  std::ofstream(big) << "name: [" << std::string(9 << 20, '1') << "]\n";
  r = Yoke("train " + big, true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("over the limit of 8388608"), std::string::npos) << r.out.substr(0, 500);
  EXPECT_LT(r.out.size(), 1000u);
  const std::string deep = dir + "/deep.yaml";
  std::ofstream(deep) << "name: " << std::string(100000, '[') << "\n";
  r = Yoke("train " + deep, true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("levels deep, over the limit of 64"), std::string::npos) << r.out;

  // A data root reached through a symlink that leads out of it is refused
  // by the trainer, which resolves it on its own machine.
  const std::string root = dir + "/root";
  std::filesystem::create_directories(root);
  std::filesystem::create_directory_symlink("/etc", root + "/etc");
  r = Yoke(
      "train " + cfg + " --data-root " + root + " --set data.train.images=" + root + "/etc/shadow",
      true);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("is outside the allowed directories"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("root:"), std::string::npos) << "no bytes of the file: " << r.out;
  std::filesystem::remove_all(dir);
}

// --resume DIR picks the newest checkpoint that verifies: a torn newest file
// is passed over for the one before it.
TEST(TrainE2ETest, ResumeFromADirectoryTakesTheNewestValidCheckpoint) {
  const std::string cfg = SourceDir() + "/configs/fashion_mnist_mlp.yaml";
  char tmpl[] = "/tmp/yoke_e2e_resume_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  RunResult r = Yoke("train " + cfg + " --set training.max_steps=20 --set checkpoint.dir=" + dir +
                         " --set checkpoint.every_steps=10",
                     true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string newest = dir + "/ckpt-0000000020.yoke";
  ASSERT_TRUE(std::filesystem::exists(newest)) << r.out;
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) / 2);
  // --set needs a job file: resume with the job file and the directory.
  r = Yoke("train " + cfg + " --resume " + dir + " --set training.max_steps=25", true);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("resuming from " + dir + "/ckpt-0000000010.yoke"), std::string::npos)
      << r.out;
  std::filesystem::remove_all(dir);
}

// --resume-latest DIR, what a worker passes on a retry: an empty DIR starts
// from step 0 and says so; a torn newest checkpoint is named in the log and
// passed over; a DIR of only unreadable checkpoints is an error (exit 2),
// never a silent restart from step 0.
TEST(TrainE2ETest, ResumeLatestStartsFreshOnlyWhenThereIsNoCheckpoint) {
  const std::string cfg = SourceDir() + "/configs/fashion_mnist_mlp.yaml";
  char tmpl[] = "/tmp/yoke_e2e_latest_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string job = cfg + " --set checkpoint.dir=" + dir + " --set checkpoint.every_steps=10";
  RunResult r = Yoke("train " + job + " --set training.max_steps=20 --resume-latest " + dir, true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("no checkpoint in " + dir + " yet: starting from step 0"), std::string::npos)
      << r.out;
  const std::string newest = dir + "/ckpt-0000000020.yoke";
  ASSERT_TRUE(std::filesystem::exists(newest)) << r.out;
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) / 2);
  r = Yoke("train " + job + " --set training.max_steps=25 --resume-latest " + dir, true);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("skipping checkpoint " + newest + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resumed from " + dir + "/ckpt-0000000010.yoke"), std::string::npos)
      << r.out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    // Tear every checkpoint; the tensorboard/ directory beside them stays.
    if (e.path().filename().string().rfind("ckpt-", 0) != 0) continue;
    std::filesystem::resize_file(e.path(), 10);
  }
  r = Yoke("train " + job + " --resume-latest " + dir, true);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--resume-latest: no valid checkpoint in " + dir), std::string::npos)
      << r.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace yoke::e2e
