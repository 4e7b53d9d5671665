#include "jobspec/path_confinement.h"

#include <filesystem>
#include <string>
#include <vector>

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

using testing::HasSubstr;

v1::JobSpec Load(const std::string& yaml, const std::vector<std::string>& overrides) {
  auto s = LoadJobSpecString(yaml, overrides, "test.yaml");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : v1::JobSpec();
}

TEST(NormalizePathTest, Lexical) {
  EXPECT_EQ(NormalizePath("/a/./b/../c"), "/a/c");
  EXPECT_EQ(NormalizePath("//a//b/"), "/a/b");
  EXPECT_EQ(NormalizePath("/../../x"), "/x");
  EXPECT_EQ(NormalizePath("/"), "/");
  EXPECT_EQ(NormalizePath("/a/b/../../.."), "/");
  EXPECT_EQ(NormalizePath("a/../../b"), "../b");
  EXPECT_EQ(NormalizePath("./a"), "a");
  EXPECT_EQ(NormalizePath(""), ".");
}

v1::JobSpec PathJob() {
  return Load(R"(
data:
  train: {format: cifar10, files: [/data/cifar/a.bin, /data/cifar/b.bin]}
  test: {format: idx, images: /datasets/t-images.gz, labels: /datasets/t-labels.gz}
checkpoint: {dir: /ckpt/job1}
)",
              {});
}

const std::vector<std::string> kRoots = {"/data", "/datasets/", "/ckpt"};

TEST(ValidatePathsUnderTest, AcceptsPathsUnderTheRoots) {
  EXPECT_TRUE(ValidatePathsUnder(PathJob(), kRoots).ok()) << ValidatePathsUnder(PathJob(), kRoots);
  EXPECT_TRUE(ValidatePathsUnder(PathJob(), {"/"}).ok());
  // A root itself is allowed (a checkpoint dir may be the root).
  EXPECT_TRUE(ValidatePathsUnder(Load("checkpoint: {dir: /ckpt/}", {}), kRoots).ok());
  // "/data/x/../y" stays under /data.
  EXPECT_TRUE(ValidatePathsUnder(Load("data: {train: {images: /data/x/../y}}", {}), kRoots).ok());
}

TEST(ValidatePathsUnderTest, NoRootsMeansNoRestriction) {
  EXPECT_TRUE(ValidatePathsUnder(Load("data: {train: {images: rel/x}}", {}), {}).ok());
}

void ExpectPathRejected(const std::vector<std::string>& overrides, const std::string& expected) {
  absl::Status s = ValidatePathsUnder(Load("", overrides), kRoots);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << testing::PrintToString(overrides);
  EXPECT_THAT(std::string(s.message()), HasSubstr(expected));
}

TEST(ValidatePathsUnderTest, RejectsEscapesAndRelativePaths) {
  ExpectPathRejected({"data.train.images=/data/../etc/passwd"},
                     "data.train.images: '/data/../etc/passwd' is outside the allowed "
                     "directories (/data, /datasets, /ckpt)");
  ExpectPathRejected({"data.train.labels=/database/labels"},
                     "data.train.labels: '/database/labels'");
  ExpectPathRejected({"data.train.files=[/data/a, /tmp/b]"}, "data.train.files[1]: '/tmp/b'");
  ExpectPathRejected({"data.test.images=/etc/shadow"}, "data.test.images");
  ExpectPathRejected({"data.train.root=/home/me/photos"}, "data.train.root: '/home/me/photos'");
  ExpectPathRejected({"data.test.files=[/data/../../../root]"}, "data.test.files[0]");
  ExpectPathRejected({"checkpoint.dir=/ckpt/../var/lib"}, "checkpoint.dir: '/ckpt/../var/lib'");
  ExpectPathRejected({"data.train.images=data/x.gz"},
                     "data.train.images: 'data/x.gz' must be an absolute path");
  ExpectPathRejected({"checkpoint.dir=./ckpt"},
                     "checkpoint.dir: './ckpt' must be an absolute path");
}

// The trainer writes cache files: they go under the checkpoint roots, and a
// data root does not admit them.
TEST(ValidateJobPathsTest, CacheFilesBelongUnderTheCheckpointRoots) {
  const v1::JobSpec under_ckpt = Load(
      "data: {train: {format: image_folder, root: /data/img, cache_file: /ckpt/c/train.cache}, "
      "test: {format: image_folder, root: /data/img, cache_file: /ckpt/c/test.cache}}",
      {});
  EXPECT_TRUE(ValidateJobPaths(under_ckpt, {"/data"}, {"/ckpt"}).ok())
      << ValidateJobPaths(under_ckpt, {"/data"}, {"/ckpt"});
  const v1::JobSpec under_data =
      Load("data: {train: {format: image_folder, root: /data/img, cache_file: /data/c}}", {});
  absl::Status s = ValidateJobPaths(under_data, {"/data"}, {"/ckpt"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("data.train.cache_file: '/data/c' is outside the allowed directories "
                        "(/ckpt)"));
  const v1::JobSpec test_outside = Load(
      "data: {train: {format: image_folder, root: /data/img}, "
      "test: {format: image_folder, root: /data/img, cache_file: /tmp/t.cache}}",
      {});
  EXPECT_THAT(std::string(ValidateJobPaths(test_outside, {"/data"}, {"/ckpt"}).message()),
              HasSubstr("data.test.cache_file: '/tmp/t.cache'"));
}

// A symlink inside a root that points outside it is an escape: paths are
// compared with symlinks resolved.
TEST(ValidatePathsUnderTest, RejectsEscapesThroughSymlinks) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(testing::TempDir()) / "validate_symlinks";
  fs::remove_all(dir);
  fs::create_directories(dir / "root" / "real");
  fs::create_directories(dir / "outside");
  fs::create_directory_symlink(dir / "outside", dir / "root" / "escape");
  fs::create_directory_symlink(dir / "root" / "real", dir / "root" / "inside");
  const std::vector<std::string> roots = {(dir / "root").string()};
  auto check = [&](const std::string& images) {
    return ValidatePathsUnder(Load("", {"data.train.images=" + images}), roots);
  };
  const absl::Status escaped = check((dir / "root" / "escape" / "secret").string());
  EXPECT_EQ(escaped.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(escaped.message()), HasSubstr("is outside the allowed directories"));
  // A file that does not exist yet under a symlinked directory is resolved too.
  EXPECT_FALSE(check((dir / "root" / "escape" / "new" / "file").string()).ok());
  // A symlink that stays inside the root is fine, and so is the real path.
  EXPECT_TRUE(check((dir / "root" / "inside" / "x").string()).ok());
  EXPECT_TRUE(check((dir / "root" / "real" / "x").string()).ok());
  // A root that is itself a symlink is resolved the same way.
  fs::create_directory_symlink(dir / "root", dir / "root-link");
  EXPECT_TRUE(
      ValidatePathsUnder(Load("", {"data.train.images=" + (dir / "root" / "real" / "x").string()}),
                         {(dir / "root-link").string()})
          .ok());
  fs::remove_all(dir);
}

TEST(ValidatePathsUnderTest, RootsMustBeAbsolute) {
  absl::Status s = ValidatePathsUnder(PathJob(), {"/data", "data"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("allowed root 'data'"));
}

}  // namespace
}  // namespace yoke::common
