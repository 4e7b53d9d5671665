#include "data/idx_reader.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

using ::testing::HasSubstr;
using testing::IdxImages;
using testing::IdxLabels;
using testing::TempDir;
using testing::WriteBytes;
using testing::WriteGzip;

const char kFashion[] = "/usr/share/datasets/fashion-mnist/";

std::string FashionFile(const std::string& name) { return std::string(kFashion) + name; }

bool HaveFashion() { return std::filesystem::exists(FashionFile("train-images-idx3-ubyte.gz")); }

// A tiny valid pair: 5 images of 3x4 with pixel = 10*i + j, labels 0..4.
struct Tiny {
  std::vector<uint8_t> pixels, labels;
  Tiny() {
    for (int i = 0; i < 5; ++i) {
      for (int j = 0; j < 12; ++j) pixels.push_back(static_cast<uint8_t>(10 * i + j));
      labels.push_back(static_cast<uint8_t>(i));
    }
  }
  std::vector<uint8_t> images_file() const { return IdxImages(5, 3, 4, pixels); }
  std::vector<uint8_t> labels_file() const { return IdxLabels(5, labels); }
};

absl::Status ReadPair(const TempDir& dir, const std::vector<uint8_t>& images,
                      const std::vector<uint8_t>& labels, bool gz = false) {
  const std::string ip = dir.File(gz ? "i.gz" : "i"), lp = dir.File(gz ? "l.gz" : "l");
  if (gz) {
    EXPECT_TRUE(WriteGzip(ip, images));
    EXPECT_TRUE(WriteGzip(lp, labels));
  } else {
    EXPECT_TRUE(WriteBytes(ip, images));
    EXPECT_TRUE(WriteBytes(lp, labels));
  }
  return ReadIdx(ip, lp).status();
}

TEST(IdxReaderTest, FashionMnistTrainLoads) {
  if (!HaveFashion()) GTEST_SKIP() << "no Fashion-MNIST under " << kFashion;
  const auto t0 = std::chrono::steady_clock::now();
  auto ds =
      ReadIdx(FashionFile("train-images-idx3-ubyte.gz"), FashionFile("train-labels-idx1-ubyte.gz"));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::printf("Fashion-MNIST train (gz) loaded in %.3f s\n", secs);
  const Dataset& d = **ds;
  EXPECT_EQ(d.size(), 60000);
  EXPECT_EQ(d.example_shape(), (std::vector<int64_t>{28, 28, 1}));
  EXPECT_EQ(d.num_classes(), 10);
  EXPECT_EQ(d.element_type(), ElementType::kU8);
  std::map<int, int> counts;
  for (int64_t i = 0; i < d.size(); ++i) counts[d.Label(i)]++;
  ASSERT_EQ(counts.size(), 10u);
  for (auto [label, n] : counts) EXPECT_EQ(n, 6000) << "label " << label;

  // Check pixels and labels against zlib's own decompression of the files.
  const std::vector<uint8_t> raw = testing::Gunzip(FashionFile("train-images-idx3-ubyte.gz"));
  const std::vector<uint8_t> rawl = testing::Gunzip(FashionFile("train-labels-idx1-ubyte.gz"));
  ASSERT_EQ(raw.size(), 16u + 60000u * 784u);
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{31337}, int64_t{59999}}) {
    const auto* px = static_cast<const uint8_t*>(d.Example(i, nullptr));
    EXPECT_EQ(0, std::memcmp(px, raw.data() + 16 + i * 784, 784)) << "image " << i;
    EXPECT_EQ(d.Label(i), rawl[8 + i]) << "label " << i;
  }
  // Fashion-MNIST's first training example is an ankle boot (class 9).
  EXPECT_EQ(d.Label(0), 9);
}

TEST(IdxReaderTest, FashionMnistTestLoadsAndRawCopyIsIdentical) {
  if (!HaveFashion()) GTEST_SKIP() << "no Fashion-MNIST under " << kFashion;
  auto gz =
      ReadIdx(FashionFile("t10k-images-idx3-ubyte.gz"), FashionFile("t10k-labels-idx1-ubyte.gz"));
  ASSERT_TRUE(gz.ok()) << gz.status();
  EXPECT_EQ((*gz)->size(), 10000);
  std::map<int, int> counts;
  for (int64_t i = 0; i < (*gz)->size(); ++i) counts[(*gz)->Label(i)]++;
  for (auto [label, n] : counts) EXPECT_EQ(n, 1000) << "label " << label;

  TempDir dir;
  ASSERT_TRUE(
      WriteBytes(dir.File("images"), testing::Gunzip(FashionFile("t10k-images-idx3-ubyte.gz"))));
  ASSERT_TRUE(
      WriteBytes(dir.File("labels"), testing::Gunzip(FashionFile("t10k-labels-idx1-ubyte.gz"))));
  auto raw = ReadIdx(dir.File("images"), dir.File("labels"));
  ASSERT_TRUE(raw.ok()) << raw.status();
  ASSERT_EQ((*raw)->size(), 10000);
  EXPECT_EQ((*raw)->example_shape(), (*gz)->example_shape());
  EXPECT_EQ(0, std::memcmp((*raw)->Example(0, nullptr), (*gz)->Example(0, nullptr), 10000 * 784));
  for (int64_t i = 0; i < 10000; ++i) ASSERT_EQ((*raw)->Label(i), (*gz)->Label(i));
}

TEST(IdxReaderTest, TinyPairRawAndGzip) {
  Tiny t;
  TempDir dir;
  for (bool gz : {false, true}) {
    const std::string ip = dir.File(gz ? "i.gz" : "i"), lp = dir.File(gz ? "l.gz" : "l");
    ASSERT_TRUE(gz ? WriteGzip(ip, t.images_file()) : WriteBytes(ip, t.images_file()));
    ASSERT_TRUE(gz ? WriteGzip(lp, t.labels_file()) : WriteBytes(lp, t.labels_file()));
    auto ds = ReadIdx(ip, lp);
    ASSERT_TRUE(ds.ok()) << ds.status();
    EXPECT_EQ((*ds)->size(), 5);
    EXPECT_EQ((*ds)->example_shape(), (std::vector<int64_t>{3, 4, 1}));
    EXPECT_EQ((*ds)->num_classes(), 10);
    float f[12];
    (*ds)->ExampleAsFloat(3, f);
    for (int j = 0; j < 12; ++j) EXPECT_EQ(f[j], 30 + j);
    EXPECT_EQ((*ds)->Label(4), 4);
  }
}

TEST(IdxReaderTest, NumClassesGrowsWithLabels) {
  Tiny t;
  t.labels[2] = 26;  // EMNIST letters go up to 26
  TempDir dir;
  ASSERT_TRUE(WriteBytes(dir.File("i"), t.images_file()));
  ASSERT_TRUE(WriteBytes(dir.File("l"), t.labels_file()));
  auto ds = ReadIdx(dir.File("i"), dir.File("l"));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_classes(), 27);
}

TEST(IdxReaderTest, TruncatedImagesFail) {
  Tiny t;
  TempDir dir;
  for (bool gz : {false, true}) {
    std::vector<uint8_t> images = t.images_file();
    images.resize(images.size() - 7);
    absl::Status s = ReadPair(dir, images, t.labels_file(), gz);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("header says 5 images of 3x4 (60 bytes after the 16-byte "
                          "header) but the file holds 53"));
  }
}

TEST(IdxReaderTest, TrailingBytesFail) {
  Tiny t;
  TempDir dir;
  for (bool gz : {false, true}) {
    std::vector<uint8_t> images = t.images_file();
    images.push_back(0);
    absl::Status s = ReadPair(dir, images, t.labels_file(), gz);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("trailing data"));
    std::vector<uint8_t> labels = t.labels_file();
    labels.push_back(1);
    s = ReadPair(dir, t.images_file(), labels, gz);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("trailing data"));
  }
}

TEST(IdxReaderTest, AbsurdHeaderFailsWithoutAllocating) {
  Tiny t;
  TempDir dir;
  // 2^31 labels, or 5 images of 65535x65535 (21 GB): the reader must compare
  // the header with the bytes really present instead of allocating for it.
  const uint32_t huge = 0x80000000u;
  absl::Status s = ReadPair(dir, IdxImages(5, 65535, 65535, t.pixels), t.labels_file());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("(21474181125 bytes after the 16-byte header) but the file holds 60"));
  s = ReadPair(dir, t.images_file(), IdxLabels(huge, t.labels));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("header says 2147483648 labels"));
  // Rows x cols x count overflowing 64 bits.
  s = ReadPair(dir, IdxImages(5, 0xFFFFFFFFu, 0xFFFFFFFFu, t.pixels), t.labels_file());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("no file can hold"));
  // A plausible-looking lie: 60000 images of 28x28 in a 60-byte payload.
  s = ReadPair(dir, IdxImages(5, 28, 28, t.pixels), t.labels_file());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("5 images of 28x28 (3920 bytes after the 16-byte header) but the "
                        "file holds 60"));
}

TEST(IdxReaderTest, WrongMagicFails) {
  Tiny t;
  TempDir dir;
  // Swapped files.
  absl::Status s = ReadPair(dir, t.labels_file(), t.images_file());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad magic 0x00000803"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("this is an images file"));
  s = ReadPair(dir, IdxImages(5, 3, 4, t.pixels, 0x00000903), t.labels_file());
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad magic 0x00000903 (expected 0x00000803"));
}

TEST(IdxReaderTest, MismatchedCountsFail) {
  Tiny t;
  TempDir dir;
  std::vector<uint8_t> four(t.labels.begin(), t.labels.end() - 1);
  absl::Status s = ReadPair(dir, t.images_file(), IdxLabels(4, four));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("holds 5 images but"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("holds 4 labels"));
}

TEST(IdxReaderTest, EmptyAndZeroSizedFail) {
  Tiny t;
  TempDir dir;
  absl::Status s = ReadPair(dir, {}, t.labels_file());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("too short for an IDX images header"));
  s = ReadPair(dir, t.images_file(), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = ReadPair(dir, {}, {}, /*gz=*/true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = ReadPair(dir, IdxImages(0, 3, 4, {}), IdxLabels(0, {}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = ReadPair(dir, IdxImages(5, 0, 4, {}), t.labels_file());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("every dimension must be > 0"));
}

TEST(IdxReaderTest, MissingFileIsNotFound) {
  TempDir dir;
  Tiny t;
  ASSERT_TRUE(WriteBytes(dir.File("l"), t.labels_file()));
  auto ds = ReadIdx(dir.File("nope.gz"), dir.File("l"));
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("nope.gz"));
  ds = ReadIdx(dir.File("l"), dir.path());  // a directory
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IdxReaderTest, TruncatedGzipStreamFails) {
  Tiny t;
  TempDir dir;
  // Big enough that the compressed stream is more than a header.
  std::vector<uint8_t> pixels(2000 * 12);
  std::mt19937 gen(1);
  for (auto& p : pixels) p = static_cast<uint8_t>(gen());
  std::vector<uint8_t> labels(2000, 1);
  ASSERT_TRUE(WriteGzip(dir.File("i.gz"), IdxImages(2000, 3, 4, pixels)));
  ASSERT_TRUE(WriteGzip(dir.File("l.gz"), IdxLabels(2000, labels)));
  ASSERT_TRUE(ReadIdx(dir.File("i.gz"), dir.File("l.gz")).ok());
  std::vector<uint8_t> gz = testing::Gunzip(dir.File("i.gz"));  // sanity
  ASSERT_EQ(gz.size(), 16u + pixels.size());
  std::filesystem::resize_file(dir.File("i.gz"), std::filesystem::file_size(dir.File("i.gz")) / 2);
  auto ds = ReadIdx(dir.File("i.gz"), dir.File("l.gz"));
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
}

// Random corruptions of a valid pair must give a dataset or an error, never
// a crash (run this binary under ASan to also catch stray reads).
TEST(IdxReaderTest, RandomCorruptionNeverCrashes) {
  Tiny t;
  TempDir dir;
  std::mt19937 gen(12345);
  int ok = 0, failed = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> files[2] = {t.images_file(), t.labels_file()};
    std::vector<uint8_t>& f = files[gen() % 2];
    switch (gen() % 4) {
      case 0:  // flip a few bytes, header included
        for (int k = 0, n = 1 + gen() % 4; k < n; ++k) f[gen() % f.size()] = gen();
        break;
      case 1:  // overwrite a header byte only
        f[gen() % (&f == &files[0] ? 16 : 8)] = gen();
        break;
      case 2:  // truncate
        f.resize(gen() % f.size());
        break;
      case 3:  // append
        for (int k = 0, n = 1 + gen() % 20; k < n; ++k) f.push_back(gen());
        break;
    }
    const bool gz = gen() % 2;
    const std::string ip = dir.File(gz ? "i.gz" : "i"), lp = dir.File(gz ? "l.gz" : "l");
    ASSERT_TRUE(gz ? WriteGzip(ip, files[0]) : WriteBytes(ip, files[0]));
    ASSERT_TRUE(gz ? WriteGzip(lp, files[1]) : WriteBytes(lp, files[1]));
    auto ds = ReadIdx(ip, lp);
    if (ds.ok()) {
      ++ok;
      const Dataset& d = **ds;
      ASSERT_GT(d.size(), 0);
      std::vector<float> buf(d.example_numel());
      for (int64_t i = 0; i < d.size(); ++i) {
        d.ExampleAsFloat(i, buf.data());
        ASSERT_GE(d.Label(i), 0);
        ASSERT_LT(d.Label(i), d.num_classes());
      }
    } else {
      ++failed;
      ASSERT_FALSE(ds.status().message().empty());
    }
  }
  // Flips inside the payload keep the file valid; the rest must fail.
  EXPECT_GT(ok, 0);
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace yoke::data
