#include "data/input_file.h"

#include <random>

#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::vector<uint8_t> RandomBytes(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(gen() % 7);  // compressible
  return b;
}

TEST(InputFileTest, GzipAndRawReadTheSame) {
  TempDir dir;
  const std::vector<uint8_t> data = RandomBytes(3'000'000, 7);
  ASSERT_TRUE(testing::WriteBytes(dir.File("raw"), data));
  ASSERT_TRUE(testing::WriteGzip(dir.File("z.gz"), data));
  for (const char* name : {"raw", "z.gz"}) {
    auto got = ReadWholeFile(dir.File(name), data.size());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == data) << name;
  }
}

TEST(InputFileTest, ReadRestStopsAtTheLimit) {
  TempDir dir;
  const std::vector<uint8_t> data = RandomBytes(100000, 3);
  ASSERT_TRUE(testing::WriteGzip(dir.File("z.gz"), data));
  auto f = InputFile::Open(dir.File("z.gz"));
  ASSERT_TRUE(f.ok()) << f.status();
  uint8_t head[10];
  auto n = f->Read(head, sizeof(head));
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 10u);
  EXPECT_EQ(0, std::memcmp(head, data.data(), 10));
  std::vector<uint8_t> rest;
  ASSERT_TRUE(f->ReadRest(&rest, 500).ok());
  ASSERT_EQ(rest.size(), 500u);
  EXPECT_EQ(0, std::memcmp(rest.data(), data.data() + 10, 500));
  ASSERT_TRUE(f->ReadRest(&rest, 1u << 30).ok());
  EXPECT_EQ(rest.size(), data.size() - 10);  // everything else, no more
  EXPECT_EQ(0, std::memcmp(rest.data(), data.data() + 10, rest.size()));
}

TEST(InputFileTest, WholeFileOverLimitFails) {
  TempDir dir;
  ASSERT_TRUE(testing::WriteBytes(dir.File("f"), RandomBytes(101, 1)));
  EXPECT_TRUE(ReadWholeFile(dir.File("f"), 101).ok());
  auto got = ReadWholeFile(dir.File("f"), 100);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("limit of 100 bytes"));
}

TEST(InputFileTest, MissingAndDirectory) {
  TempDir dir;
  auto f = InputFile::Open(dir.File("missing"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr(dir.File("missing")));
  f = InputFile::Open(dir.path());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("not a regular file"));
}

TEST(InputFileTest, CorruptGzipFails) {
  TempDir dir;
  const std::vector<uint8_t> data = RandomBytes(200000, 5);
  ASSERT_TRUE(testing::WriteGzip(dir.File("z.gz"), data));
  std::vector<uint8_t> gz;
  {
    FILE* fp = std::fopen(dir.File("z.gz").c_str(), "rb");
    ASSERT_NE(fp, nullptr);
    int c;
    while ((c = std::fgetc(fp)) != EOF) gz.push_back(static_cast<uint8_t>(c));
    std::fclose(fp);
  }
  // Damage the middle of the deflate stream; the CRC or the stream breaks.
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 16; ++i) gz[i] ^= 0x5A;
  ASSERT_TRUE(testing::WriteBytes(dir.File("bad.gz"), gz));
  auto got = ReadWholeFile(dir.File("bad.gz"), 1 << 20);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("bad.gz: cannot read"));
}

}  // namespace
}  // namespace yoke::data
