// Training from image folders against training from the IDX files they were
// written from (issue 12): the zoo CNN trained on a PNG tree of Fashion-MNIST
// equals the IDX run bit for bit (same seed, same pixels), and on a JPEG tree
// (quality 95) it lands within 1 point of the IDX run's accuracy.
//
// The image-folder reader lists examples class by class (label order, then
// file name = IDX index), so the IDX side trains on IDX files rewritten in
// that order: then both runs see the same examples at the same indices, and
// the sampler's shuffles pick the same batches.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/idx_reader.h"
#include "data/image_folder_writer.h"
#include "engine/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/trainer.h"

namespace yoke::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAreArray;

const char kFashion[] = "/usr/share/datasets/fashion-mnist";

using common::TempDir;

void PutU32(std::string* s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s->push_back(static_cast<char>(v >> shift));
}

void WriteFile(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  ASSERT_EQ(std::fclose(f), 0);
}

// One split of Fashion-MNIST (the first n examples), as a PNG tree, a JPEG
// tree and raw IDX files in the trees' order.
struct Split {
  std::string png, jpeg, images, labels;
};

void MakeSplit(const std::string& dir, const char* prefix, int64_t n, Split* out) {
  auto idx = data::ReadIdx(absl::StrCat(kFashion, "/", prefix, "-images-idx3-ubyte.gz"),
                           absl::StrCat(kFashion, "/", prefix, "-labels-idx1-ubyte.gz"));
  ASSERT_TRUE(idx.ok()) << idx.status();
  std::unique_ptr<data::Dataset> ds = data::TakeFirst(std::move(*idx), n);
  out->png = absl::StrCat(dir, "/png/", prefix);
  out->jpeg = absl::StrCat(dir, "/jpeg/", prefix);
  data::ImageFolderWriteOptions o;
  o.class_names = data::FashionMnistClassNames();
  ASSERT_TRUE(data::WriteImageFolder(*ds, out->png, o).ok());
  o.jpeg = true;
  o.quality = 95;
  ASSERT_TRUE(data::WriteImageFolder(*ds, out->jpeg, o).ok());

  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return ds->Label(a) < ds->Label(b); });
  std::string images, labels;
  PutU32(&images, data::kIdxImagesMagic);
  PutU32(&images, static_cast<uint32_t>(n));
  PutU32(&images, 28);
  PutU32(&images, 28);
  PutU32(&labels, data::kIdxLabelsMagic);
  PutU32(&labels, static_cast<uint32_t>(n));
  std::vector<unsigned char> scratch(ds->example_bytes());
  for (int64_t i : order) {
    const auto* p = static_cast<const char*>(ds->Example(i, scratch.data()));
    images.append(p, ds->example_bytes());
    labels.push_back(static_cast<char>(ds->Label(i)));
  }
  out->images = absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte");
  out->labels = absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte");
  WriteFile(out->images, images);
  WriteFile(out->labels, labels);
}

std::string IdxSpec(const Split& s) {
  return absl::StrCat("{format: idx, images: ", s.images, ", labels: ", s.labels, "}");
}
std::string FolderSpec(const std::string& root) {
  return absl::StrCat("{format: image_folder, root: ", root,
                      ", image_size: [28, 28], channels: 1}");
}

v1::JobSpec Job(const std::string& train, const std::string& test, int64_t batch) {
  auto spec = common::LoadJobSpecString(absl::StrCat(R"(
model: {zoo: cnn}
data:
  train: )",
                                                     train, R"(
  test: )",
                                                     test, R"(
  transform: {divisor: 255}
training:
  epochs: 1
  batch_size: )",
                                                     batch, R"(
  seed: 5
  optimizer: {type: adam, lr: 0.001}
)"),
                                        {}, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

struct Outcome {
  v1::TrainResult result;
  std::vector<float> params;
};

Outcome Train(const v1::JobSpec& spec) {
  Outcome o;
  auto t = Trainer::Create(spec, {});
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return o;
  auto r = (*t)->Run();
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) o.result = *r;
  const engine::Tensor& v = (*t)->model().params().flat_values();
  o.params.assign(v.data<float>(), v.data<float>() + v.numel());
  return o;
}

class ImageFolderTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(absl::StrCat(kFashion, "/train-images-idx3-ubyte.gz"))) {
      GTEST_SKIP() << kFashion << " is missing (package dataset-fashion-mnist)";
    }
  }
  TempDir dir_;
};

TEST_F(ImageFolderTrainTest, PngTreeTrainsBitForBitLikeIdx) {
  Split train, test;
  MakeSplit(dir_.path(), "train", 480, &train);
  MakeSplit(dir_.path(), "t10k", 200, &test);
  v1::JobSpec idx = Job(IdxSpec(train), IdxSpec(test), 32);
  v1::JobSpec png = Job(FolderSpec(train.png), FolderSpec(test.png), 32);
  const std::string ckpt = dir_.path() + "/ckpt";
  png.mutable_checkpoint()->set_dir(ckpt);
  const Outcome a = Train(idx), b = Train(png);
  ASSERT_EQ(a.params.size(), b.params.size());
  ASSERT_FALSE(a.params.empty());
  EXPECT_EQ(0, std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)))
      << "the PNG run's parameters differ from the IDX run's";
  EXPECT_EQ(a.result.test_accuracy(), b.result.test_accuracy());
  EXPECT_EQ(a.result.test_loss(), b.result.test_loss());
  EXPECT_EQ(a.result.steps(), 15);

  // The checkpoint keeps the class mapping.
  ASSERT_FALSE(b.result.checkpoint().empty());
  auto ck = engine::ReadCheckpoint(b.result.checkpoint());
  ASSERT_TRUE(ck.ok()) << ck.status();
  std::vector<std::string> expected;
  for (int c = 0; c < 10; ++c) {
    expected.push_back(absl::StrCat(c, "_", data::FashionMnistClassNames()[c]));
  }
  EXPECT_THAT(ck->header.class_names(), ElementsAreArray(expected));
  // ... and a resume onto other classes is refused.
  fs::rename(train.png + "/9_ankle_boot", train.png + "/9_boot");
  TrainerOptions resume;
  resume.resume = b.result.checkpoint();
  auto t = Trainer::Create(png, resume);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), ::testing::HasSubstr("9_boot"));
}

// 12,000 training images, one epoch with Adam: about 0.80 to 0.84, where the
// accuracy of runs with slightly different pixels varied by 0.1 to 0.5
// points over seeds 1..4 (SGD after 6,000 images, near 0.70, varied by up
// to 1.5). About 30 s on 2 cores: ctest runs it as its own entry,
// worker_image_folder_jpeg_accuracy_test, labelled slow.
TEST_F(ImageFolderTrainTest, JpegTreeLandsWithinOnePointOfIdx) {
  Split train, test;
  MakeSplit(dir_.path(), "train", 12000, &train);
  MakeSplit(dir_.path(), "t10k", 2000, &test);
  const Outcome a = Train(Job(IdxSpec(train), IdxSpec(test), 64));
  const Outcome b = Train(Job(FolderSpec(train.jpeg), FolderSpec(test.jpeg), 64));
  std::printf("IDX %.4f JPEG %.4f\n", a.result.test_accuracy(), b.result.test_accuracy());
  EXPECT_GT(a.result.test_accuracy(), 0.7);
  EXPECT_NEAR(b.result.test_accuracy(), a.result.test_accuracy(), 0.01)
      << "IDX " << a.result.test_accuracy() << ", JPEG " << b.result.test_accuracy();
}

}  // namespace
}  // namespace yoke::worker
