#include "jobspec/job_data_check.h"

#include <filesystem>
#include <fstream>

#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

void Touch(const std::string& path, const std::string& text = "x") {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

v1::JobSpec Job(const std::vector<std::string>& overrides) {
  auto s = LoadJobSpecString("name: t\n", overrides);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : v1::JobSpec();
}

std::string Folder(const std::string& root) {
  return "{format: image_folder, root: " + root + ", image_size: [4, 4]}";
}

std::string Error(const v1::JobSpec& spec, DataCheck mode = DataCheck::kAll) {
  auto r = CheckJobData(spec, mode);
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(CheckJobDataTest, ImageFolderIsListedAndCounted) {
  TempDir d;
  Touch(d.File("b/x/1.png"));
  Touch(d.File("b/2.JPEG"));
  Touch(d.File("a/3.jpg"));
  Touch(d.File("a/notes.txt"));
  auto lines = CheckJobData(Job({"data.train=" + Folder(d.path()),
                                 "data.test={format: synthetic, shape: [2], num_classes: 2}"}),
                            DataCheck::kAll);
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_THAT(*lines, ElementsAre("data.train: image_folder " + d.path() +
                                      ": 2 classes, 3 images listed (not decoded)",
                                  "data.test: synthetic: no files to check"));
}

TEST(CheckJobDataTest, ImageFolderErrorsNameTheFolder) {
  TempDir d;
  // No class folder at all (a loose image is no class).
  Touch(d.File("loose.png"));
  EXPECT_THAT(Error(Job({"data.train=" + Folder(d.path())})),
              HasSubstr("data.train: " + d.path() + ": no class folders"));
  // An empty class folder, in data.test.
  Touch(d.File("cat/1.png"));
  fs::create_directories(d.File("dog/sub"));
  Touch(d.File("dog/sub/readme.txt"));
  const std::string both = Folder(d.path());
  EXPECT_THAT(Error(Job({"data.train={format: synthetic}", "data.test=" + both})),
              HasSubstr("data.test: " + d.File("dog") +
                        ": class folder 'dog' holds no .jpg, .jpeg or .png images"));
  // The quick (submit) mode finds it too.
  EXPECT_THAT(Error(Job({"data.train=" + both}), DataCheck::kLocalImageFolders),
              HasSubstr("class folder 'dog'"));
  // A missing root, and a file where the root should be.
  EXPECT_THAT(
      Error(Job({"data.train=" + Folder(d.File("missing"))})),
      HasSubstr(d.File("missing") + ": the image folder root must be a readable directory"));
  EXPECT_THAT(Error(Job({"data.train=" + Folder(d.File("cat/1.png"))})),
              HasSubstr("cat/1.png: the image folder root must be a readable directory"));
}

TEST(CheckJobDataTest, AClassFolderLinkingOutOfTheRootIsRefused) {
  TempDir d, outside;
  Touch(outside.File("1.png"));
  Touch(d.File("cat/1.png"));
  fs::create_directory_symlink(outside.path(), d.File("dog"));
  EXPECT_THAT(Error(Job({"data.train=" + Folder(d.path())})),
              HasSubstr("outside the image folder root"));
}

TEST(CheckJobDataTest, OtherFormatsNeedReadableFiles) {
  TempDir d;
  Touch(d.File("images.gz"));
  const std::string idx = "data.train={format: idx, images: " + d.File("images.gz") +
                          ", labels: " + d.File("labels.gz") + "}";
  auto r = CheckJobData(Job({idx}), DataCheck::kAll);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("data.train.labels: " + d.File("labels.gz") + ": No such file"));
  EXPECT_THAT(Error(Job({"data.train={format: csv, files: [" + d.path() + "]}"})),
              HasSubstr("data.train.files[0]: " + d.path() + ": not a regular file"));
  Touch(d.File("labels.gz"));
  auto ok = CheckJobData(Job({idx}), DataCheck::kAll);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(*ok, ElementsAre(HasSubstr("labels.gz readable")));
  // The submit mode leaves them (and roots it cannot see) to the trainer.
  auto submit = CheckJobData(Job({"data.train={format: idx, images: /nope, labels: /nope}",
                                  "data.test=" + Folder(d.File("missing"))}),
                             DataCheck::kLocalImageFolders);
  ASSERT_TRUE(submit.ok()) << submit.status();
  EXPECT_TRUE(submit->empty());
}

// The shape the submit estimate counts an idx set at: from the header of an
// images file this machine can read at an absolute path, and none otherwise.
TEST(VisibleIdxShapeTest, OnlyAnAbsoluteReadableImagesFileGivesAShape) {
  TempDir d;
  std::string header;
  for (uint32_t w : {0x803u, 1u, 6u, 9u}) {
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<char>(w >> shift));
  }
  Touch(d.File("images"), header + std::string(54, '\0'));
  auto idx = [](const std::string& images) {
    return Job({"data.train={format: idx, images: " + images + ", labels: " + images + "}"});
  };
  EXPECT_THAT(VisibleIdxShape(idx(d.File("images"))), ElementsAre(6, 9, 1));
  EXPECT_TRUE(VisibleIdxShape(idx(d.File("missing"))).empty());
  EXPECT_TRUE(VisibleIdxShape(idx("images")).empty()) << "a relative path is the worker's";
  Touch(d.File("labels"), std::string("\0\0\x08\x01", 4) + std::string(12, '\0'));
  EXPECT_TRUE(VisibleIdxShape(idx(d.File("labels"))).empty()) << "not an images file";
  EXPECT_TRUE(VisibleIdxShape(Job({"data.train={format: synthetic, shape: [6, 9, 1]}"})).empty());
}

}  // namespace
}  // namespace yoke::common
