// The image_folder file cache (cache_file): the same batches as decoding,
// reused across opens and processes, rebuilt when stale or damaged.
#include "data/image_cache_file.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/image_folder_writer.h"
#include "data/open_dataset.h"
#include "data/pipeline.h"
#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TempDir;

// Pixels that differ from image to image and from place to place.
Image Pattern(int64_t h, int64_t w, int c, int seed) {
  Image img;
  img.height = h;
  img.width = w;
  img.channels = c;
  img.pixels.resize(h * w * c);
  for (size_t i = 0; i < img.pixels.size(); ++i) {
    img.pixels[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i / w) * 3);
  }
  return img;
}

void WriteImage(const std::string& path, const Image& img, bool jpeg) {
  fs::create_directories(fs::path(path).parent_path());
  auto bytes = jpeg ? EncodeJpeg(img, 90) : EncodePng(img);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(testing::WriteText(path, *bytes));
}

class CacheFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < kImages; ++i) {
      WriteImage(root_.File(std::to_string(i % 3) + "/" + std::to_string(i) + ".jpg"),
                 Pattern(12 + i % 4, 10 + i % 3, 3, i), /*jpeg=*/true);
    }
  }
  ImageFolderOptions Opts(bool with_cache) const {
    ImageFolderOptions o;
    o.root = root_.path();
    o.height = 8;
    o.width = 8;
    o.channels = 3;
    o.crop = CropMode::kRandom;
    o.crop_height = 6;
    o.crop_width = 6;
    o.seed = 5;
    if (with_cache) o.cache_file = CachePath();
    return o;
  }
  std::string CachePath() const { return cache_dir_.File("sub/train.cache"); }
  std::unique_ptr<ImageFolderDataset> Open(const ImageFolderOptions& o) {
    auto ds = ImageFolderDataset::Open(o);
    EXPECT_TRUE(ds.ok()) << ds.status();
    return ds.ok() ? *std::move(ds) : nullptr;
  }
  // Every resized image (no crop), as Load returns it.
  static std::vector<std::vector<uint8_t>> All(const ImageFolderDataset& ds) {
    std::vector<std::vector<uint8_t>> out;
    std::vector<uint8_t> s(ds.example_bytes());
    for (int64_t i = 0; i < ds.size(); ++i) {
      auto p = ds.Load(i, 0, false, s.data());
      EXPECT_TRUE(p.ok() && *p != nullptr) << i;
      if (!p.ok() || *p == nullptr) return {};
      const auto* b = static_cast<const uint8_t*>(*p);
      out.emplace_back(b, b + ds.example_bytes());
    }
    return out;
  }
  // Two epochs of training batches, random crops and flips included.
  static std::vector<float> TwoEpochs(std::shared_ptr<const Dataset> ds) {
    v1::TransformSpec t;
    t.set_divisor(255);
    t.set_horizontal_flip(true);
    PipelineOptions po;
    po.decode_threads = 2;
    po.end_epoch = 2;
    auto p = Pipeline::Create(ds, {7, 4, true}, t, true, po);
    EXPECT_TRUE(p.ok());
    std::vector<float> all;
    while (p.ok()) {
      auto b = (*p)->Next();
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok() || !b->has_value()) break;
      all.insert(all.end(), (*b)->x.begin(), (*b)->x.end());
    }
    return all;
  }
  ImageFolderOptions NoCrop(ImageFolderOptions o) const {
    o.crop = CropMode::kNone;
    return o;
  }

  static constexpr int kImages = 24;
  TempDir root_, cache_dir_;
};

TEST_F(CacheFileTest, BatchesAreIdenticalToDecodingAndLaterOpensDecodeNothing) {
  const std::vector<float> plain = TwoEpochs(Open(Opts(false)));
  ASSERT_EQ(plain.size(), 2u * kImages * 6 * 6 * 3);

  auto cold = Open(Opts(true));
  ASSERT_NE(cold, nullptr);
  ASSERT_NE(cold->cache_file(), nullptr);
  EXPECT_FALSE(cold->cache_file()->reused());
  const ImageFolderDataset* cold_raw = cold.get();
  std::shared_ptr<const Dataset> cold_ds(std::move(cold));
  EXPECT_EQ(TwoEpochs(cold_ds), plain);
  // Epoch 1 decoded each image once; epoch 2 read them all from the file.
  EXPECT_EQ(cold_raw->decoded(), kImages);
  EXPECT_EQ(cold_raw->cache_file()->hits(), kImages);
  cold_ds.reset();

  auto warm = Open(Opts(true));
  ASSERT_NE(warm, nullptr);
  EXPECT_TRUE(warm->cache_file()->reused());
  const ImageFolderDataset* warm_raw = warm.get();
  std::shared_ptr<const Dataset> warm_ds(std::move(warm));
  // The key was taken at open: with the images now gone, only the file can
  // answer.
  std::vector<fs::path> images;
  for (const auto& e : fs::recursive_directory_iterator(root_.path())) {
    if (e.is_regular_file()) images.push_back(e.path());
  }
  ASSERT_EQ(images.size(), static_cast<size_t>(kImages));
  for (const fs::path& f : images) fs::remove(f);
  EXPECT_EQ(TwoEpochs(warm_ds), plain);
  EXPECT_EQ(warm_raw->decoded(), 0);
}

TEST_F(CacheFileTest, ThroughOpenDatasetAndNotWithTheMemoryCache) {
  v1::DatasetSpec spec;
  spec.set_format("image_folder");
  spec.set_root(root_.path());
  spec.add_image_size(8);
  spec.add_image_size(8);
  spec.set_cache_file(CachePath());
  auto ds = OpenDataset(spec, "data.train");
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<uint8_t> s((*ds)->example_bytes());
  ASSERT_TRUE((*ds)->Load(0, 0, false, s.data()).ok());
  EXPECT_TRUE(fs::exists(CachePath()));
  spec.set_cache(true);
  auto both = OpenDataset(spec, "data.train");
  EXPECT_THAT(std::string(both.status().message()),
              HasSubstr("data.train: cache and cache_file: set one"));
}

TEST_F(CacheFileTest, ChangedImageOrImageSizeRebuildsTheCache) {
  const auto o = NoCrop(Opts(true));
  {
    auto first = Open(o);
    ASSERT_NE(first, nullptr);
    All(*first);
  }
  // Another image in the place of 0.jpg: a new size and mtime.
  const std::string changed = root_.File("0/0.jpg");
  WriteImage(changed, Pattern(20, 20, 3, 99), /*jpeg=*/true);
  auto after = Open(o);
  ASSERT_NE(after, nullptr);
  EXPECT_FALSE(after->cache_file()->reused());
  EXPECT_EQ(All(*after), All(*Open(NoCrop(Opts(false)))));
  EXPECT_EQ(after->decoded(), kImages);

  // Only the mtime moves (the same bytes): rebuilt too.
  fs::last_write_time(changed, fs::last_write_time(changed) + std::chrono::seconds(3));
  auto touched = Open(o);
  ASSERT_NE(touched, nullptr);
  EXPECT_FALSE(touched->cache_file()->reused());

  // Another image_size: another key, the bytes of the new size.
  auto o12 = o;
  o12.height = o12.width = 12;
  auto bigger = Open(o12);
  ASSERT_NE(bigger, nullptr);
  EXPECT_FALSE(bigger->cache_file()->reused());
  auto plain12 = NoCrop(Opts(false));
  plain12.height = plain12.width = 12;
  EXPECT_EQ(All(*bigger), All(*Open(plain12)));
  // And back to 8x8: rebuilt again, never the 12x12 bytes.
  auto back = Open(o);
  ASSERT_NE(back, nullptr);
  EXPECT_FALSE(back->cache_file()->reused());
  EXPECT_EQ(All(*back), All(*Open(NoCrop(Opts(false)))));
}

TEST_F(CacheFileTest, TruncatedOrCorruptFilesAreDetected) {
  const auto o = NoCrop(Opts(true));
  const auto want = All(*Open(NoCrop(Opts(false))));
  {
    auto fill = Open(o);
    ASSERT_NE(fill, nullptr);
    ASSERT_EQ(All(*fill), want);
  }
  const uintmax_t full = fs::file_size(CachePath());

  // A corrupt entry: one data byte flipped in the last image.
  {
    std::fstream f(CachePath(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(full - 5));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(static_cast<std::streamoff>(full - 5));
    f.write(&c, 1);
  }
  auto corrupt = Open(o);
  ASSERT_NE(corrupt, nullptr);
  EXPECT_TRUE(corrupt->cache_file()->reused());  // the header is fine
  EXPECT_EQ(All(*corrupt), want);
  EXPECT_EQ(corrupt->decoded(), 1);  // only the damaged one, then rewritten
  EXPECT_EQ(All(*corrupt), want);
  EXPECT_EQ(corrupt->decoded(), 1);

  // Truncated: rebuilt from scratch.
  fs::resize_file(CachePath(), full / 2);
  auto truncated = Open(o);
  ASSERT_NE(truncated, nullptr);
  EXPECT_FALSE(truncated->cache_file()->reused());
  EXPECT_EQ(All(*truncated), want);
  EXPECT_EQ(truncated->decoded(), kImages);
  EXPECT_EQ(fs::file_size(CachePath()), full);

  // A header byte scribbled on (the key's): rebuilt. The byte is flipped,
  // not overwritten with a constant it may already hold (the key is a hash).
  {
    std::fstream f(CachePath(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(20);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(20);
    f.write(&c, 1);
  }
  auto scribbled = Open(o);
  ASSERT_NE(scribbled, nullptr);
  EXPECT_FALSE(scribbled->cache_file()->reused());
  EXPECT_EQ(All(*scribbled), want);
}

TEST_F(CacheFileTest, AFileThatIsNoCacheIsNeverOverwritten) {
  fs::create_directories(fs::path(CachePath()).parent_path());
  ASSERT_TRUE(testing::WriteText(CachePath(), "precious data, not a cache"));
  auto ds = ImageFolderDataset::Open(Opts(true));
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr(CachePath()));
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("not a Yoke image cache"));
  std::ifstream in(CachePath());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious data, not a cache");
}

// Ranks on one host open and fill one cache at once: each gets the right
// pixels, and the file they leave is whole.
TEST_F(CacheFileTest, ConcurrentProcessesShareOneFile) {
  const auto o = NoCrop(Opts(true));
  const auto want = All(*Open(NoCrop(Opts(false))));
  // A stale file first, so that every process finds something to rebuild.
  fs::create_directories(fs::path(CachePath()).parent_path());
  {
    auto o4 = o;
    o4.height = o4.width = 4;
    ASSERT_NE(Open(o4), nullptr);
  }
  constexpr int kProcs = 4;
  std::vector<pid_t> kids;
  for (int k = 0; k < kProcs; ++k) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      for (int round = 0; round < 3 && rc == 0; ++round) {
        auto ds = ImageFolderDataset::Open(o);
        if (!ds.ok()) {
          rc = 3;
          break;
        }
        std::vector<uint8_t> s((*ds)->example_bytes());
        for (int64_t j = 0; j < (*ds)->size(); ++j) {
          const int64_t i = (j + k * 5) % (*ds)->size();  // start apart
          auto p = (*ds)->Load(i, 0, false, s.data());
          if (!p.ok() || *p == nullptr || std::memcmp(*p, want[i].data(), want[i].size()) != 0) {
            rc = 4;
            break;
          }
        }
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  auto after = Open(o);
  ASSERT_NE(after, nullptr);
  EXPECT_TRUE(after->cache_file()->reused());
  EXPECT_EQ(All(*after), want);
  EXPECT_EQ(after->decoded(), 0);
  // No temporary file is left behind.
  for (const auto& e : fs::directory_iterator(fs::path(CachePath()).parent_path())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(ImageCacheFileTest, ADirectoryOrAFifoAtThePathIsRefusedWithoutHanging) {
  TempDir d;
  fs::create_directories(d.File("dir"));
  auto dir = ImageCacheFile::Open(d.File("dir"), HashCacheKey("k"), 2, 16);
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr(d.File("dir")));
  ASSERT_EQ(::mkfifo(d.File("fifo").c_str(), 0644), 0);
  auto fifo = ImageCacheFile::Open(d.File("fifo"), HashCacheKey("k"), 2, 16);
  ASSERT_FALSE(fifo.ok());
  EXPECT_THAT(std::string(fifo.status().message()),
              HasSubstr(d.File("fifo") + ": image cache: not a regular file"));
}

TEST(ImageCacheFileTest, UnwritableDirectoryIsAClearError) {
  auto f = ImageCacheFile::Open("/proc/yoke-no-such/x.cache", HashCacheKey("k"), 2, 16);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(std::string(f.status().message()), HasSubstr("/proc/yoke-no-such/x.cache"));
}

}  // namespace
}  // namespace yoke::data
