// `yoke validate --data`, the real binary: the data a job names is opened
// as the trainer would (listed, not decoded), and an empty class folder, a
// root without class folders, a missing root or a missing file is an error
// naming it; without --data only the spec is checked, and the output says
// which.
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e_util.h"

namespace yoke::e2e {
namespace {

namespace fs = std::filesystem;

class ValidateDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("yoke_validate_data");
    root_ = dir_ + "/images";
    Touch(root_ + "/cat/1.png");
    Touch(root_ + "/dog/2.jpg");
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void Touch(const std::string& path) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << "listed, never decoded";
  }
  // A job whose train (and test) set is the image folder at `root`.
  std::string Job(const std::string& train, const std::string& test = "") const {
    const std::string path = dir_ + "/job.yaml";
    std::ofstream(path) << "name: v\nmodel: {zoo: mlp, hidden: [8]}\ndata:\n  train: " << train
                        << "\n"
                        << (test.empty() ? "" : "  test: " + test + "\n")
                        << "training: {epochs: 1, batch_size: 8, optimizer: {type: sgd, lr: "
                           "0.1}}\n";
    return path;
  }
  static std::string Folder(const std::string& root) {
    return "{format: image_folder, root: " + root + ", image_size: [4, 4], channels: 1}";
  }
  RunResult Validate(const std::string& args) const {
    return Sh(BinDir() + "/yoke validate " + args, /*merge_stderr=*/true);
  }

  std::string dir_, root_;
};

TEST_F(ValidateDataTest, ReportsWhatWasCheckedOrThatOnlyTheSpecWas) {
  const std::string job = Job(Folder(root_), Folder(root_));
  RunResult r = Validate(job + " --data");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("data.train: image_folder " + root_ +
                       ": 2 classes, 2 images listed (not decoded)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("data.test: image_folder " + root_), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(job + ": valid (spec and data)"), std::string::npos) << r.out;

  r = Validate(job);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("valid (spec only"), std::string::npos) << r.out;

  // --output yaml keeps stdout YAML: the report goes to stderr.
  r = Sh(BinDir() + "/yoke validate " + job + " --data -o yaml 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find("data.train: image_folder"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("root: " + root_), std::string::npos) << r.out;
}

TEST_F(ValidateDataTest, AnEmptyClassFolderIsAnErrorNamingIt) {
  fs::create_directories(root_ + "/emu");
  Touch(root_ + "/emu/readme.txt");
  // Only with --data: the spec itself is fine.
  EXPECT_EQ(Validate(Job(Folder(root_))).exit_code, 0);
  // A good train set, so that it is data.test's folder that is named.
  Touch(dir_ + "/good/a/1.png");
  const std::string good_train = Job(Folder(dir_ + "/good"), Folder(root_));
  RunResult r = Validate(good_train + " --data");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("yoke validate: data.test: " + root_ +
                       "/emu: class folder 'emu' holds no .jpg, .jpeg or .png images"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find(": valid ("), std::string::npos) << r.out;
}

TEST_F(ValidateDataTest, NoClassFoldersMissingRootAndMissingFilesAreErrors) {
  const std::string flat = dir_ + "/flat";
  Touch(flat + "/1.png");
  RunResult r = Validate(Job(Folder(flat)) + " --data");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("data.train: " + flat + ": no class folders"), std::string::npos) << r.out;

  r = Validate(Job(Folder(dir_ + "/nowhere")) + " --data");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(dir_ + "/nowhere: the image folder root must be a readable directory"),
            std::string::npos)
      << r.out;

  r = Validate(Job("{format: idx, images: " + dir_ + "/i.gz, labels: " + dir_ + "/l.gz}") +
               " --data");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("data.train.images: " + dir_ + "/i.gz: No such file or directory"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace yoke::e2e
