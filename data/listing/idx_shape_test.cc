// IdxImageShape: the header of raw and gzip-compressed IDX images files, and
// the files that are not one.
#include "data/listing/idx_shape.h"

#include <zlib.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Header(uint32_t magic, uint32_t count, uint32_t rows, uint32_t cols) {
  std::string h;
  for (uint32_t w : {magic, count, rows, cols}) {
    for (int shift = 24; shift >= 0; shift -= 8)
      h.push_back(static_cast<char>((w >> shift) & 0xff));
  }
  return h;
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(gz);
}

TEST(IdxImageShape, ReadsRowsAndColumnsFromRawAndGzipFiles) {
  TempDir dir("yoke_idx_shape");
  const std::string payload(2 * 5 * 7, '\x11');
  WriteRaw(dir.File("raw"), Header(0x803, 2, 5, 7) + payload);
  WriteGz(dir.File("packed.gz"), Header(0x803, 2, 7, 5) + payload);
  auto raw = IdxImageShape(dir.File("raw"));
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_THAT(*raw, ElementsAre(5, 7, 1));
  auto packed = IdxImageShape(dir.File("packed.gz"));
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_THAT(*packed, ElementsAre(7, 5, 1));
}

TEST(IdxImageShape, TheRealFashionMnistIs28By28) {
  const std::string path = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  if (!std::ifstream(path).good()) GTEST_SKIP() << path << " is not installed";
  auto shape = IdxImageShape(path);
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_THAT(*shape, ElementsAre(28, 28, 1));
}

TEST(IdxImageShape, WhatIsNotAnImagesFileIsNamed) {
  TempDir dir("yoke_idx_shape");
  EXPECT_EQ(IdxImageShape(dir.File("missing")).status().code(), absl::StatusCode::kNotFound);
  // A labels file (magic 0x801), a short header, and zero-sized images.
  WriteRaw(dir.File("labels"), Header(0x801, 2, 0, 0));
  WriteRaw(dir.File("short"), Header(0x803, 2, 5, 7).substr(0, 10));
  WriteRaw(dir.File("empty"), Header(0x803, 2, 0, 7));
  absl::Status s = IdxImageShape(dir.File("labels")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("magic 0x00000801 is not an IDX images file's"));
  s = IdxImageShape(dir.File("short")).status();
  EXPECT_THAT(s.message(), HasSubstr("header is 16 bytes; the file holds 10"));
  s = IdxImageShape(dir.File("empty")).status();
  EXPECT_THAT(s.message(), HasSubstr("images of 0x7 pixels"));
  EXPECT_THAT(s.message(), HasSubstr(dir.File("empty")));
}

}  // namespace
}  // namespace yoke::common
