#include "common/read_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / name).string();
}

TEST(ReadRegularFileTest, ReadsAWholeFile) {
  const std::string p = TempPath("read_file_ok");
  std::ofstream(p, std::ios::binary) << std::string("a\0b", 3);
  auto got = ReadRegularFile(p, 3, "job file");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string("a\0b", 3));
}

TEST(ReadRegularFileTest, RefusesFilesOverTheLimitWithoutEchoingThem) {
  const std::string p = TempPath("read_file_big");
  std::ofstream(p, std::ios::binary) << "hunter2:secret-xy";
  auto got = ReadRegularFile(p, 4, "job file");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("17 bytes, over the limit of 4"));
  EXPECT_THAT(std::string(got.status().message()), ::testing::Not(HasSubstr("hunter2")));
}

TEST(ReadRegularFileTest, RefusesDevicesDirectoriesAndFifosAtOnce) {
  auto zero = ReadRegularFile("/dev/zero", 1 << 20, "job file");
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("a character device"));
  auto dir = ReadRegularFile(testing::TempDir(), 1 << 20, "job file");
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("a directory"));
  // A FIFO with no writer: opening must not block.
  const std::string fifo = TempPath("read_file_fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = ReadRegularFile(fifo, 1 << 20, "job file");
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("a FIFO"));
  ::unlink(fifo.c_str());
}

TEST(ReadRegularFileTest, MissingFileIsNotFound) {
  auto got = ReadRegularFile(TempPath("no_such_file"), 10, "config file");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("cannot open config file"));
}

}  // namespace
}  // namespace yoke::common
