// cache_file through the real trainer (`yoke train`): a run with the cache
// trains exactly as one without it, and a later run takes its pixels from
// the file, not from the images: with every image's bytes replaced by
// garbage of the same size and mtime (the one change the key cannot see,
// docs/job_spec.md), the cached run still trains alike, while a run
// without the cache fails on the first image it decodes.
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

namespace fs = std::filesystem;

constexpr char kFashion[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";

// The JSON result's "train_loss"... up to "train_seconds" (timings differ).
std::string Losses(const std::string& out) {
  const size_t line = out.rfind("{\"test_accuracy\"");
  if (line == std::string::npos) return "";
  const size_t end = out.find("\"samples_per_second\"", line);
  const size_t loss = out.find("\"train_loss\"", line);
  const size_t loss_end = out.find(',', loss);
  if (end == std::string::npos || loss == std::string::npos) return "";
  return out.substr(line, end - line) + out.substr(loss, loss_end - loss);
}

TEST(ImageCacheFileE2ETest, TrainsAsWithoutTheCacheAndLaterRunsReadOnlyTheFile) {
  if (!fs::exists(kFashion)) GTEST_SKIP() << kFashion << " is missing";
  const std::string dir = MakeTempDir("yoke_e2e_cache_file");
  RunResult made = Sh(
      BinDir() + "/yoke-make-image-folder " + dir + "/images --train 300 --test 100 --formats png",
      true);
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const std::string job = dir + "/job.yaml";
  std::ofstream(job) << "name: cache-file\n"
                        "model: {zoo: mlp, hidden: [32]}\n"
                        "data:\n"
                        "  train: {format: image_folder, root: "
                     << dir << "/images/png/train, image_size: [20, 20], channels: 1}\n"
                     << "  test: {format: image_folder, root: " << dir
                     << "/images/png/test, image_size: [20, 20], channels: 1}\n"
                        "  transform: {divisor: 255}\n"
                        "training: {epochs: 2, batch_size: 32, threads: 1, seed: 3,\n"
                        "           optimizer: {type: sgd, lr: 0.1}}\n";
  const std::string train = BinDir() + "/yoke train " + job + " --output json";
  const std::string cached = " --set data.train.cache_file=" + dir +
                             "/cache/train.cache --set data.test.cache_file=" + dir +
                             "/cache/test.cache";

  RunResult plain = Sh(train + " 2>/dev/null");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  const std::string want = Losses(plain.out);
  ASSERT_NE(want.find("\"test_loss\":"), std::string::npos) << plain.out;
  ASSERT_NE(want.find("\"train_loss\":"), std::string::npos) << plain.out;
  RunResult cold = Sh(train + cached + " 2>/dev/null");
  ASSERT_EQ(cold.exit_code, 0) << cold.out;
  EXPECT_EQ(Losses(cold.out), want);
  ASSERT_TRUE(fs::exists(dir + "/cache/train.cache"));

  // Garbage in every image, with its size and mtime kept.
  int replaced = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/images/png")) {
    if (!e.is_regular_file()) continue;
    struct stat st;
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    std::ofstream(e.path(), std::ios::binary | std::ios::trunc)
        << std::string(static_cast<size_t>(st.st_size), 'z');
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, e.path().c_str(), times, 0), 0);
    ++replaced;
  }
  ASSERT_EQ(replaced, 400);
  RunResult warm = Sh(train + cached + " 2>&1");
  ASSERT_EQ(warm.exit_code, 0) << warm.out;
  EXPECT_EQ(Losses(warm.out), want);
  EXPECT_EQ(warm.out.find("rebuilding"), std::string::npos) << warm.out;
  RunResult undecodable = Sh(train + " 2>&1");
  EXPECT_EQ(undecodable.exit_code, 2) << undecodable.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace yoke::e2e
