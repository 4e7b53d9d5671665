#include "data/image_folder.h"

#include <unistd.h>

#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "data/idx_reader.h"
#include "data/image_decode.h"
#include "data/image_folder_writer.h"
#include "data/open_dataset.h"
#include "data/pipeline.h"
#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TempDir;

// An image whose every pixel of channel k is value + k.
Image Solid(int64_t h, int64_t w, int c, int value) {
  Image img;
  img.height = h;
  img.width = w;
  img.channels = c;
  img.pixels.resize(h * w * c);
  for (int64_t i = 0; i < h * w; ++i) {
    for (int k = 0; k < c; ++k) img.pixels[i * c + k] = static_cast<uint8_t>(value + k);
  }
  return img;
}

// Each pixel (y, x) is 10 * y + x: crops are easy to recognise.
Image Ramp(int64_t h, int64_t w) {
  Image img = Solid(h, w, 1, 0);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) img.pixels[y * w + x] = static_cast<uint8_t>(10 * y + x);
  }
  return img;
}

void WriteImage(const std::string& path, const Image& img, bool jpeg = false) {
  fs::create_directories(fs::path(path).parent_path());
  auto bytes = jpeg ? EncodeJpeg(img, 95) : EncodePng(img);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(testing::WriteText(path, *bytes));
}

ImageFolderOptions Opts(const std::string& root, int64_t size, int channels = 1) {
  ImageFolderOptions o;
  o.root = root;
  o.height = size;
  o.width = size;
  o.channels = channels;
  return o;
}

std::vector<uint8_t> Bytes(const Dataset& ds, int64_t i) {
  std::vector<uint8_t> out(ds.example_bytes());
  const auto* p = static_cast<const uint8_t*>(ds.Example(i, out.data()));
  return std::vector<uint8_t>(p, p + ds.example_bytes());
}

TEST(ImageFolderTest, ClassesFollowByteWiseFolderOrderAndExtensionsAnyCase) {
  TempDir d;
  // Byte-wise: "10" < "9" < "B" < "_x" < "a" (digits, upper case, '_', lower case).
  const std::vector<std::string> classes = {"a", "_x", "B", "9", "10"};
  for (size_t c = 0; c < classes.size(); ++c) {
    const std::string dir = d.File(classes[c]);
    WriteImage(dir + "/b.PNG", Solid(4, 4, 1, 10 * c + 1));
    WriteImage(dir + "/a.jpeg", Solid(4, 4, 1, 10 * c + 2), /*jpeg=*/true);
    WriteImage(dir + "/sub/c.Jpg", Solid(4, 4, 1, 10 * c + 3), /*jpeg=*/true);
    ASSERT_TRUE(testing::WriteText(dir + "/notes.txt", "not an image"));
    ASSERT_TRUE(testing::WriteText(dir + "/x.gif", "GIF89a"));
  }
  ASSERT_TRUE(testing::WriteText(d.File("README.png"), "a file at the top is no class"));
  auto ds = ImageFolderDataset::Open(Opts(d.path(), 4));
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_THAT((*ds)->class_names(), ElementsAre("10", "9", "B", "_x", "a"));
  EXPECT_EQ((*ds)->num_classes(), 5);
  ASSERT_EQ((*ds)->size(), 15);
  EXPECT_THAT((*ds)->example_shape(), ElementsAre(4, 4, 1));
  const std::vector<std::string> sorted = {"10", "9", "B", "_x", "a"};
  for (int64_t i = 0; i < 15; ++i) {
    const int label = static_cast<int>(i / 3);
    EXPECT_EQ((*ds)->Label(i), label);
    // Within a class: a.jpeg, b.PNG, then sub/c.Jpg (directory, then name).
    const char* names[3] = {"/a.jpeg", "/b.PNG", "/sub/c.Jpg"};
    EXPECT_THAT((*ds)->path(i), HasSubstr("/" + sorted[label] + names[i % 3]));
    const int c = static_cast<int>(std::find(classes.begin(), classes.end(), sorted[label]) -
                                   classes.begin());
    const int expected = 10 * c + (i % 3 == 0 ? 2 : i % 3 == 1 ? 1 : 3);
    for (uint8_t v : Bytes(**ds, i)) EXPECT_NEAR(v, expected, 2) << (*ds)->path(i);
  }
}

TEST(ImageFolderTest, DecodesPngExactlyInGrayAndRgb) {
  TempDir d;
  Image gray = Ramp(5, 6);
  WriteImage(d.File("k/0.png"), gray);
  auto g = ImageFolderDataset::Open([&] {
    auto o = Opts(d.path(), 0);
    o.height = 5;
    o.width = 6;
    return o;
  }());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Bytes(**g, 0), gray.pixels);
  auto o = Opts(d.path(), 0, 3);
  o.height = 5;
  o.width = 6;
  auto rgb = ImageFolderDataset::Open(o);
  ASSERT_TRUE(rgb.ok()) << rgb.status();
  EXPECT_THAT((*rgb)->example_shape(), ElementsAre(5, 6, 3));
  std::vector<uint8_t> px = Bytes(**rgb, 0);
  for (size_t i = 0; i < gray.pixels.size(); ++i) {
    EXPECT_EQ(px[3 * i], gray.pixels[i]);
    EXPECT_EQ(px[3 * i + 2], gray.pixels[i]);
  }
}

TEST(ImageFolderTest, ResizesThenCropsCenterOrRandom) {
  TempDir d;
  WriteImage(d.File("k/big.png"), Solid(40, 30, 1, 90));
  WriteImage(d.File("k/ramp.png"), Ramp(8, 8));
  auto o = Opts(d.path(), 8);
  auto ds = ImageFolderDataset::Open(o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  for (uint8_t v : Bytes(**ds, 0)) EXPECT_EQ(v, 90);  // 40x30 -> 8x8, still flat
  EXPECT_EQ(Bytes(**ds, 1), Ramp(8, 8).pixels);       // same size: untouched

  o.crop = CropMode::kCenter;
  o.crop_height = 4;
  o.crop_width = 2;
  auto center = ImageFolderDataset::Open(o);
  ASSERT_TRUE(center.ok()) << center.status();
  EXPECT_THAT((*center)->example_shape(), ElementsAre(4, 2, 1));
  // Rows 2..5, columns 3..4.
  EXPECT_THAT(Bytes(**center, 1), ElementsAre(23, 24, 33, 34, 43, 44, 53, 54));

  o.crop = CropMode::kRandom;
  o.seed = 5;
  auto random = ImageFolderDataset::Open(o);
  ASSERT_TRUE(random.ok()) << random.status();
  std::vector<uint8_t> s((*random)->example_bytes());
  std::set<std::vector<uint8_t>> seen;
  for (int64_t epoch = 0; epoch < 12; ++epoch) {
    auto a = (*random)->Load(1, epoch, /*train=*/true, s.data());
    ASSERT_TRUE(a.ok());
    std::vector<uint8_t> crop(static_cast<const uint8_t*>(*a),
                              static_cast<const uint8_t*>(*a) + s.size());
    // The window is a pure function of (seed, epoch, index).
    auto again = (*random)->Load(1, epoch, true, s.data());
    EXPECT_EQ(std::vector<uint8_t>(static_cast<const uint8_t*>(*again),
                                   static_cast<const uint8_t*>(*again) + s.size()),
              crop);
    // A real 4x2 window of the ramp: consecutive columns, rows 10 apart.
    const int y0 = crop[0] / 10, x0 = crop[0] % 10;
    for (int y = 0; y < 4; ++y) {
      for (int x = 0; x < 2; ++x) EXPECT_EQ(crop[y * 2 + x], 10 * (y0 + y) + x0 + x);
    }
    seen.insert(crop);
  }
  EXPECT_GT(seen.size(), 3u);
  // Evaluation crops the centre.
  auto eval = (*random)->Load(1, 3, /*train=*/false, s.data());
  EXPECT_THAT(std::vector<uint8_t>(static_cast<const uint8_t*>(*eval),
                                   static_cast<const uint8_t*>(*eval) + s.size()),
              ElementsAre(23, 24, 33, 34, 43, 44, 53, 54));
}

TEST(ImageFolderTest, ValidationSplitIsDeterministicDisjointAndComplete) {
  TempDir d;
  for (int i = 0; i < 20; ++i) {
    WriteImage(d.File(std::string(i % 2 ? "odd" : "even") + "/" + std::to_string(i) + ".png"),
               Solid(2, 2, 1, i));
  }
  auto paths = [&](const std::string& subset, uint64_t seed) {
    auto o = Opts(d.path(), 2);
    o.validation_split = 0.25;
    o.subset = subset;
    o.seed = seed;
    auto ds = ImageFolderDataset::Open(o);
    EXPECT_TRUE(ds.ok()) << ds.status();
    std::vector<std::string> out;
    for (int64_t i = 0; i < (*ds)->size(); ++i) {
      out.push_back((*ds)->path(i));
      EXPECT_EQ((*ds)->num_classes(), 2);
      EXPECT_EQ((*ds)->Label(i), absl::StrContains((*ds)->path(i), "/odd/") ? 1 : 0);
    }
    return out;
  };
  std::vector<std::string> train = paths("training", 3), val = paths("validation", 3);
  EXPECT_EQ(train.size(), 15u);
  EXPECT_EQ(val.size(), 5u);
  std::set<std::string> all(train.begin(), train.end());
  for (const std::string& p : val) EXPECT_TRUE(all.insert(p).second) << p << " in both";
  EXPECT_EQ(all.size(), 20u);
  EXPECT_EQ(paths("training", 3), train);
  EXPECT_EQ(paths("validation", 3), val);
  EXPECT_NE(paths("validation", 4), val);

  auto o = Opts(d.path(), 2);
  o.validation_split = 0.25;  // without a subset
  EXPECT_THAT(std::string(ImageFolderDataset::Open(o).status().message()), HasSubstr("subset"));
  o.subset = "validation";
  o.validation_split = 0.01;  // floor(0.2) = 0 images
  EXPECT_THAT(std::string(ImageFolderDataset::Open(o).status().message()),
              HasSubstr("no validation image"));
}

TEST(ImageFolderTest, EmptyClassFolderNoClassesAndMissingRootAreClearErrors) {
  TempDir d;
  auto msg = [&](const std::string& root) {
    return std::string(ImageFolderDataset::Open(Opts(root, 4)).status().message());
  };
  EXPECT_THAT(msg(d.File("missing")), HasSubstr("must be a readable directory"));
  EXPECT_THAT(msg(d.path()), HasSubstr("no class folders"));
  ASSERT_TRUE(testing::WriteText(d.File("loose.png"), "x"));
  EXPECT_THAT(msg(d.path()), HasSubstr("no class folders"));
  WriteImage(d.File("cat/1.png"), Solid(4, 4, 1, 1));
  fs::create_directories(d.File("dog"));
  ASSERT_TRUE(testing::WriteText(d.File("dog/readme.txt"), "no images here"));
  EXPECT_THAT(msg(d.path()), HasSubstr("class folder 'dog' holds no .jpg, .jpeg or .png"));
  // Through OpenDataset: the field path comes first.
  v1::DatasetSpec spec;
  spec.set_format("image_folder");
  spec.set_root(d.path());
  spec.add_image_size(4);
  spec.add_image_size(4);
  auto ds = OpenDataset(spec, "data.train");
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("data.train: "));
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("'dog'"));
}

TEST(ImageFolderTest, SymlinksLeavingTheRootAreRefused) {
  TempDir d, outside;
  WriteImage(outside.File("secret.png"), Solid(4, 4, 1, 9));
  WriteImage(outside.File("cls/other.png"), Solid(4, 4, 1, 9));
  WriteImage(d.File("root/a/1.png"), Solid(4, 4, 1, 1));
  WriteImage(d.File("root/b/2.png"), Solid(4, 4, 1, 2));
  const std::string root = d.File("root");
  // A symlink that stays inside the root is fine.
  ASSERT_EQ(::symlink((root + "/a/1.png").c_str(), (root + "/b/link.png").c_str()), 0);
  auto ok = ImageFolderDataset::Open(Opts(root, 4));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->size(), 3);

  ASSERT_EQ(::symlink(outside.File("secret.png").c_str(), (root + "/b/escape.png").c_str()), 0);
  auto bad = ImageFolderDataset::Open(Opts(root, 4));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("escape.png: resolves to"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("outside the image folder root"));
  ::unlink((root + "/b/escape.png").c_str());

  // A class folder that is a symlink out of the root.
  ASSERT_EQ(::symlink(outside.File("cls").c_str(), (root + "/c").c_str()), 0);
  bad = ImageFolderDataset::Open(Opts(root, 4));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("outside the image folder root"));
  ::unlink((root + "/c").c_str());
  // `..` through a symlinked directory inside a class.
  ASSERT_EQ(::symlink("../../..", (root + "/a/up").c_str()), 0);
  auto up = ImageFolderDataset::Open(Opts(root, 4));
  ASSERT_TRUE(up.ok()) << up.status();  // directory symlinks are not followed
  EXPECT_EQ((*up)->size(), 3);
}

// The bad-file zoo: corrupt, truncated and zero-byte files, and text or a
// PNG under a .jpg name (a PNG decodes: the signature counts, not the name).
class BadFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteImage(dir_.File("a/0_good.png"), Solid(4, 4, 1, 1));
    WriteImage(dir_.File("b/7_good.jpg"), Solid(4, 4, 3, 60), /*jpeg=*/true);
    auto png = EncodePng(Solid(16, 16, 1, 5));
    auto jpg = EncodeJpeg(Solid(16, 16, 3, 5), 95);
    ASSERT_TRUE(png.ok() && jpg.ok());
    ASSERT_TRUE(
        testing::WriteText(dir_.File("a/1_truncated.png"), png->substr(0, png->size() / 2)));
    ASSERT_TRUE(
        testing::WriteText(dir_.File("a/2_truncated.jpg"), jpg->substr(0, jpg->size() - 40)));
    ASSERT_TRUE(testing::WriteText(dir_.File("a/3_empty.png"), ""));
    ASSERT_TRUE(testing::WriteText(dir_.File("a/4_text.jpg"), "hello, I am text"));
    std::string corrupt = *png;
    for (size_t i = 40; i < corrupt.size() - 12; i += 7) corrupt[i] ^= 0x5A;
    ASSERT_TRUE(testing::WriteText(dir_.File("a/5_corrupt.png"), corrupt));
    ASSERT_TRUE(testing::WriteText(dir_.File("b/6_png_named.jpg"), *png));
  }
  TempDir dir_;
};

TEST_F(BadFiles, FailModeNamesTheFile) {
  auto ds = ImageFolderDataset::Open(Opts(dir_.path(), 4));
  ASSERT_TRUE(ds.ok()) << ds.status();  // opening lists, it does not decode
  ASSERT_EQ((*ds)->size(), 8);
  std::vector<uint8_t> s((*ds)->example_bytes());
  const char* bad[] = {"1_truncated.png", "2_truncated.jpg", "3_empty.png", "4_text.jpg",
                       "5_corrupt.png"};
  for (int64_t i = 1; i <= 5; ++i) {
    auto r = (*ds)->Load(i, 0, true, s.data());
    ASSERT_FALSE(r.ok()) << (*ds)->path(i);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(bad[i - 1]));
  }
  for (int64_t i : {0, 6, 7}) EXPECT_TRUE((*ds)->Load(i, 0, true, s.data()).ok());
  EXPECT_EQ((*ds)->skipped(), 0);

  // In the pipeline, the first bad file in batch order fails the stream
  // after the batches before it.
  SamplerOptions so{/*batch_size=*/1, /*seed=*/0, /*shuffle=*/false};
  PipelineOptions po;
  po.decode_threads = 3;
  auto p = Pipeline::Create(std::shared_ptr<const Dataset>(std::move(*ds)), so, {}, false, po);
  ASSERT_TRUE(p.ok()) << p.status();
  auto b0 = (*p)->Next();
  ASSERT_TRUE(b0.ok() && b0->has_value());
  auto b1 = (*p)->Next();
  ASSERT_FALSE(b1.ok());
  EXPECT_THAT(std::string(b1.status().message()), HasSubstr("1_truncated.png"));
}

TEST_F(BadFiles, SkipModeCountsEachBadFileOnceAndShrinksTheBatch) {
  auto o = Opts(dir_.path(), 4);
  o.skip_bad = true;
  std::shared_ptr<ImageFolderDataset> ds = *ImageFolderDataset::Open(o);
  SamplerOptions so{/*batch_size=*/8, /*seed=*/0, /*shuffle=*/false};
  PipelineOptions po;
  po.decode_threads = 2;
  po.end_epoch = 2;
  auto p = Pipeline::Create(ds, so, {}, true, po);
  ASSERT_TRUE(p.ok()) << p.status();
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto b = (*p)->Next();
    ASSERT_TRUE(b.ok() && b->has_value()) << b.status();
    EXPECT_EQ((*b)->n, 3);
    EXPECT_EQ((*b)->global_n, 8);
    EXPECT_THAT((*b)->indices, ElementsAre(0, 6, 7));
    EXPECT_THAT((*b)->y, ElementsAre(0, 1, 1));
    EXPECT_EQ((*b)->x.size(), 3u * 16);
    EXPECT_EQ((*b)->x[0], 1.0f);
    EXPECT_EQ((*b)->x[16], 5.0f);  // the PNG named .jpg
  }
  EXPECT_EQ(ds->skipped(), 5);  // once each, not once per epoch
}

// Labels only decodes no image, and is refused where a bad image would be
// skipped: only decoding tells a batch's size there.
TEST_F(BadFiles, LabelsOnlyDecodesNothingAndIsRefusedWhereBadImagesAreSkipped) {
  std::shared_ptr<ImageFolderDataset> ds = *ImageFolderDataset::Open(Opts(dir_.path(), 4));
  SamplerOptions so{/*batch_size=*/4, /*seed=*/0, /*shuffle=*/true};
  PipelineOptions po;
  po.labels_only = true;
  po.end_epoch = 2;
  auto p = Pipeline::Create(ds, so, {}, true, po);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<int32_t> labels;
  for (;;) {
    auto b = (*p)->Next();
    ASSERT_TRUE(b.ok()) << b.status();  // the bad files are never read
    if (!b->has_value()) break;
    EXPECT_EQ((*b)->n, 4);
    EXPECT_TRUE((*b)->x.empty());
    for (int64_t j = 0; j < (*b)->n; ++j) {
      EXPECT_EQ((*b)->y[j], ds->Label((*b)->indices[j]));
      labels.push_back((*b)->y[j]);
    }
  }
  EXPECT_EQ(labels.size(), 16u);  // 8 images, 2 epochs
  EXPECT_EQ(ds->decoded(), 0);

  auto o = Opts(dir_.path(), 4);
  o.skip_bad = true;
  std::shared_ptr<const Dataset> skipping(std::move(*ImageFolderDataset::Open(o)));
  auto refused = Pipeline::Create(skipping, so, {}, true, po);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("may skip bad images"));
}

TEST(ImageFolderTest, CacheKeepsDecodedImages) {
  TempDir d;
  WriteImage(d.File("k/0.png"), Ramp(8, 8));
  auto o = Opts(d.path(), 4);
  o.cache = true;
  auto ds = ImageFolderDataset::Open(o);
  ASSERT_TRUE(ds.ok());
  const std::vector<uint8_t> first = Bytes(**ds, 0);
  ::unlink(d.File("k/0.png").c_str());  // only the cache can answer now
  EXPECT_EQ(Bytes(**ds, 0), first);
  o.cache = false;
  // Without the cache the file is read again (and is gone).
  WriteImage(d.File("k/0.png"), Ramp(8, 8));
  auto nocache = ImageFolderDataset::Open(o);
  ASSERT_TRUE(nocache.ok());
  ::unlink(d.File("k/0.png").c_str());
  std::vector<uint8_t> s(16);
  EXPECT_FALSE((*nocache)->Load(0, 0, false, s.data()).ok());
}

// Decoding threads change nothing but the speed.
TEST(ImageFolderTest, PipelineBatchesDoNotDependOnDecodeThreads) {
  TempDir d;
  for (int i = 0; i < 30; ++i) {
    WriteImage(d.File(std::to_string(i % 3) + "/" + std::to_string(i) + ".jpg"),
               Solid(12, 10, 3, 7 * i), /*jpeg=*/true);
  }
  auto o = Opts(d.path(), 6, 3);
  o.crop = CropMode::kRandom;
  o.crop_height = 4;
  o.crop_width = 4;
  std::shared_ptr<const Dataset> ds(std::move(*ImageFolderDataset::Open(o)));
  v1::TransformSpec t;
  t.set_divisor(255);
  t.set_horizontal_flip(true);
  auto run = [&](int threads) {
    PipelineOptions po;
    po.decode_threads = threads;
    po.end_epoch = 2;
    auto p = Pipeline::Create(ds, {7, 11, true}, t, true, po);
    EXPECT_TRUE(p.ok());
    std::vector<float> all;
    for (;;) {
      auto b = (*p)->Next();
      EXPECT_TRUE(b.ok());
      if (!b->has_value()) break;
      all.insert(all.end(), (*b)->x.begin(), (*b)->x.end());
    }
    return all;
  };
  const std::vector<float> one = run(1);
  EXPECT_EQ(one.size(), 2u * 30 * 4 * 4 * 3);
  EXPECT_EQ(run(4), one);
}

// The PNG tree of (the start of) Fashion-MNIST holds the IDX pixels: the
// reader yields the same bytes, class by class in dataset order.
TEST(ImageFolderTest, FashionMnistPngTreeHasTheIdxPixels) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir + "/t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "no " << dir;
  auto idx = ReadIdx(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_TRUE(idx.ok()) << idx.status();
  std::unique_ptr<Dataset> sub = TakeFirst(std::move(*idx), 300);
  TempDir d;
  ImageFolderWriteOptions w;
  w.class_names = FashionMnistClassNames();
  ASSERT_TRUE(WriteImageFolder(*sub, d.File("png"), w).ok());
  w.jpeg = true;
  ASSERT_TRUE(WriteImageFolder(*sub, d.File("jpeg"), w).ok());

  auto png = ImageFolderDataset::Open(Opts(d.File("png"), 28));
  auto jpg = ImageFolderDataset::Open(Opts(d.File("jpeg"), 28));
  ASSERT_TRUE(png.ok() && jpg.ok());
  EXPECT_EQ((*png)->class_names()[0], "0_t-shirt_top");
  EXPECT_EQ((*png)->class_names()[9], "9_ankle_boot");
  ASSERT_EQ((*png)->size(), 300);
  // Image-folder order: by label, then by index.
  std::vector<int64_t> order(300);
  for (int64_t i = 0; i < 300; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return sub->Label(a) < sub->Label(b); });
  double err = 0;
  for (int64_t k = 0; k < 300; ++k) {
    ASSERT_EQ((*png)->Label(k), sub->Label(order[k]));
    ASSERT_EQ(Bytes(**png, k), Bytes(*sub, order[k])) << (*png)->path(k);
    const std::vector<uint8_t> a = Bytes(**jpg, k), b = Bytes(*sub, order[k]);
    for (size_t j = 0; j < a.size(); ++j) err += std::abs(int(a[j]) - int(b[j]));
  }
  // Quality 95 stays within about a grey level on average.
  EXPECT_LT(err / (300.0 * 784), 1.5);
}

}  // namespace
}  // namespace yoke::data
