#include "data/open_dataset.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/image_decode.h"
#include "data/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

TEST(OpenDatasetTest, UnknownAndMissingFormat) {
  v1::DatasetSpec spec;
  spec.set_format("parquet");
  auto ds = OpenDataset(spec, "data.train");
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ds.status().message(),
            "data.train.format: unknown format 'parquet' (known: idx, cifar10, csv, "
            "image_folder, synthetic)");
  spec.clear_format();
  ds = OpenDataset(spec, "data.test");
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("data.test.format: required"));
}

// A spec of `format` over two examples written under `dir`.
v1::DatasetSpec SmallSpec(const std::string& format, const TempDir& dir) {
  v1::DatasetSpec spec;
  spec.set_format(format);
  if (format == "idx") {
    EXPECT_TRUE(
        testing::WriteBytes(dir.File("i"), testing::IdxImages(2, 2, 2, {0, 1, 2, 3, 4, 5, 6, 7})));
    EXPECT_TRUE(testing::WriteBytes(dir.File("l"), testing::IdxLabels(2, {0, 1})));
    spec.set_images(dir.File("i"));
    spec.set_labels(dir.File("l"));
  } else if (format == "cifar10") {
    std::vector<uint8_t> records(2 * 3073, 7);
    records[0] = 0;
    records[3073] = 1;
    EXPECT_TRUE(testing::WriteBytes(dir.File("b.bin"), records));
    spec.add_files(dir.File("b.bin"));
  } else if (format == "csv") {
    EXPECT_TRUE(testing::WriteText(dir.File("t.csv"), "1,2,0\n3,4,1\n"));
    spec.add_files(dir.File("t.csv"));
  } else if (format == "image_folder") {
    Image img;
    img.height = img.width = 4;
    img.channels = 1;
    img.pixels.assign(16, 9);
    auto png = EncodePng(img);
    EXPECT_TRUE(png.ok()) << png.status();
    for (const char* cls : {"a", "b"}) {
      std::filesystem::create_directories(dir.File(cls));
      EXPECT_TRUE(testing::WriteText(dir.File(absl::StrCat(cls, "/1.png")), png.value_or("")));
    }
    spec.set_root(dir.path());
    spec.add_image_size(4);
    spec.add_image_size(4);
    spec.set_channels(1);
  } else if (format == "synthetic") {
    spec.add_shape(4);
    spec.set_num_classes(2);
    spec.set_num_examples(2);
  } else {
    ADD_FAILURE() << "no test fixture for format '" << format << "': add one here";
  }
  return spec;
}

// OpenDataset opens every format of its list (data/names/format_names.h,
// which job validation reads) and refuses every other one, listing them all.
TEST(OpenDatasetTest, OpensExactlyTheListedFormats) {
  ASSERT_FALSE(DatasetFormats().empty());
  for (const std::string& format : DatasetFormats()) {
    TempDir dir;
    auto ds = OpenDataset(SmallSpec(format, dir), "data.train");
    ASSERT_TRUE(ds.ok()) << format << ": " << ds.status();
    EXPECT_EQ((*ds)->size(), 2) << format;
  }
  for (const char* format : {"IDX", "cifar100", "image-folder", "csv "}) {
    v1::DatasetSpec spec;
    spec.set_format(format);
    auto ds = OpenDataset(spec, "data.train");
    ASSERT_FALSE(ds.ok()) << "'" << format << "' was opened";
    EXPECT_EQ(ds.status().message(),
              absl::StrCat("data.train.format: unknown format '", format,
                           "' (known: ", absl::StrJoin(DatasetFormats(), ", "), ")"));
  }
}

TEST(OpenDatasetTest, RequiredFields) {
  v1::DatasetSpec spec;
  spec.set_format("idx");
  spec.set_images("x");
  EXPECT_EQ(OpenDataset(spec, "data.train").status().message(),
            "data.train.labels: required for format 'idx'");
  spec.set_format("cifar10");
  EXPECT_EQ(OpenDataset(spec, "data.train").status().message(),
            "data.train.files: required for format 'cifar10'");
  spec.set_format("csv");
  spec.add_files("a.csv");
  spec.add_files("b.csv");
  EXPECT_THAT(std::string(OpenDataset(spec, "data.train").status().message()),
              HasSubstr("data.train.files: format 'csv' takes exactly one file, got 2"));
  spec.set_format("synthetic");
  EXPECT_THAT(std::string(OpenDataset(spec, "data.train").status().message()),
              HasSubstr("data.train.shape: required"));
  spec.set_num_examples(-1);
  EXPECT_THAT(std::string(OpenDataset(spec, "data.train").status().message()),
              HasSubstr("data.train.num_examples: must be >= 0"));
}

TEST(OpenDatasetTest, ReaderErrorsNameFieldAndFile) {
  TempDir dir;
  v1::DatasetSpec spec;
  spec.set_format("idx");
  spec.set_images(dir.File("imgs.gz"));
  spec.set_labels(dir.File("lbls.gz"));
  auto ds = OpenDataset(spec, "data.train");
  EXPECT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("data.train: "));
  EXPECT_THAT(std::string(ds.status().message()), HasSubstr("lbls.gz"));
}

TEST(OpenDatasetTest, IdxWithCap) {
  TempDir dir;
  std::vector<uint8_t> pixels(6 * 4), labels{0, 1, 2, 3, 4, 5};
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i);
  ASSERT_TRUE(testing::WriteBytes(dir.File("i"), testing::IdxImages(6, 2, 2, pixels)));
  ASSERT_TRUE(testing::WriteBytes(dir.File("l"), testing::IdxLabels(6, labels)));
  v1::DatasetSpec spec;
  spec.set_format("idx");
  spec.set_images(dir.File("i"));
  spec.set_labels(dir.File("l"));
  auto all = OpenDataset(spec, "data.train");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)->size(), 6);
  spec.set_num_examples(4);
  auto capped = OpenDataset(spec, "data.train");
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ((*capped)->size(), 4);
  EXPECT_EQ((*capped)->num_classes(), 10);
  EXPECT_EQ((*capped)->Label(3), 3);
  float f[4];
  (*capped)->ExampleAsFloat(3, f);
  EXPECT_EQ(f[0], 12);
  spec.set_num_examples(100);  // more than there are: all of them
  EXPECT_EQ((*OpenDataset(spec, "data.train"))->size(), 6);
}

TEST(OpenDatasetTest, CsvAndSynthetic) {
  TempDir dir;
  ASSERT_TRUE(testing::WriteText(dir.File("t.csv"), "x,y,label\n1,2,1\n3,4,0\n"));
  v1::DatasetSpec spec;
  spec.set_format("csv");
  spec.add_files(dir.File("t.csv"));
  spec.set_header(true);
  spec.set_label_column(-1);
  auto csv = OpenDataset(spec, "data.train");
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ((*csv)->size(), 2);
  EXPECT_EQ((*csv)->num_classes(), 2);
  // Leaving label_column out means the last column too; 0 means the first.
  spec.clear_label_column();
  auto csv_default = OpenDataset(spec, "data.train");
  ASSERT_TRUE(csv_default.ok()) << csv_default.status();
  EXPECT_EQ((*csv_default)->Label(0), 1);
  EXPECT_EQ((*csv_default)->example_shape(), (std::vector<int64_t>{2}));
  spec.set_label_column(0);
  auto csv_first = OpenDataset(spec, "data.train");
  ASSERT_TRUE(csv_first.ok()) << csv_first.status();
  EXPECT_EQ((*csv_first)->Label(1), 3);

  v1::DatasetSpec syn;
  syn.set_format("synthetic");
  syn.add_shape(8);
  syn.add_shape(8);
  syn.add_shape(3);
  syn.set_num_classes(5);
  syn.set_num_examples(123);
  auto s = OpenDataset(syn, "data.train");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->size(), 123);
  EXPECT_EQ((*s)->num_classes(), 5);
  EXPECT_EQ((*s)->example_shape(), (std::vector<int64_t>{8, 8, 3}));
}

}  // namespace
}  // namespace yoke::data
