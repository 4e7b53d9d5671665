#include "data/cifar_reader.h"

#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// Record r: label r % 10; pixel (channel c, row y, col x) = (r + 3c + 5y + 7x) % 256,
// written as CIFAR stores it, in (C, H, W) planes.
uint8_t Pixel(int r, int c, int y, int x) {
  return static_cast<uint8_t>((r + 3 * c + 5 * y + 7 * x) % 256);
}

std::vector<uint8_t> Records(int first, int n) {
  std::vector<uint8_t> b;
  for (int r = first; r < first + n; ++r) {
    b.push_back(static_cast<uint8_t>(r % 10));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) b.push_back(Pixel(r, c, y, x));
  }
  return b;
}

TEST(CifarReaderTest, ConvertsPlanesToChannelsLast) {
  TempDir dir;
  ASSERT_TRUE(testing::WriteBytes(dir.File("data_batch_1.bin"), Records(0, 3)));
  ASSERT_TRUE(testing::WriteBytes(dir.File("data_batch_2.bin"), Records(3, 12)));
  auto ds = ReadCifar10({dir.File("data_batch_1.bin"), dir.File("data_batch_2.bin")});
  ASSERT_TRUE(ds.ok()) << ds.status();
  const Dataset& d = **ds;
  EXPECT_EQ(d.size(), 15);
  EXPECT_EQ(d.example_shape(), (std::vector<int64_t>{32, 32, 3}));
  EXPECT_EQ(d.num_classes(), 10);
  for (int r : {0, 2, 3, 14}) {
    EXPECT_EQ(d.Label(r), r % 10);
    const auto* px = static_cast<const uint8_t*>(d.Example(r, nullptr));
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(px[(y * 32 + x) * 3 + c], Pixel(r, c, y, x))
              << "record " << r << " y " << y << " x " << x << " c " << c;
  }
}

TEST(CifarReaderTest, GzipWorksToo) {
  TempDir dir;
  ASSERT_TRUE(testing::WriteGzip(dir.File("b.bin.gz"), Records(0, 2)));
  auto ds = ReadCifar10({dir.File("b.bin.gz")});
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 2);
}

TEST(CifarReaderTest, BadSizeFails) {
  TempDir dir;
  std::vector<uint8_t> b = Records(0, 2);
  b.pop_back();
  ASSERT_TRUE(testing::WriteBytes(dir.File("b.bin"), b));
  auto ds = ReadCifar10({dir.File("b.bin")});
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ds.status().message()),
              HasSubstr("holds 6145 bytes, not a positive multiple of the 3073-byte"));
  ASSERT_TRUE(testing::WriteBytes(dir.File("empty.bin"), {}));
  EXPECT_EQ(ReadCifar10({dir.File("empty.bin")}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCifar10({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadCifar10({dir.File("nope.bin")}).status().code(), absl::StatusCode::kNotFound);
}

TEST(CifarReaderTest, BadLabelFails) {
  TempDir dir;
  std::vector<uint8_t> b = Records(0, 3);
  b[2 * kCifarRecordBytes] = 10;
  ASSERT_TRUE(testing::WriteBytes(dir.File("b.bin"), b));
  auto ds = ReadCifar10({dir.File("b.bin")});
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("record 2 has label 10"));
}

}  // namespace
}  // namespace yoke::data
