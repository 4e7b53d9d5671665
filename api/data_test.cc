// DataLoader (include/yoke/data.h): order, sharding and errors, on a
// synthetic dataset and the real Fashion-MNIST files.
#include <algorithm>
#include <map>

#include "gtest/gtest.h"
#include "yoke/yoke.h"

namespace {

const char kSynthetic[] = R"(
data:
  train: {format: synthetic, shape: [2, 2, 1], num_classes: 3, num_examples: 10, seed: 4}
)";

// Every example of one epoch, as (values..., label) rows in batch order.
std::vector<std::vector<float>> Epoch(yoke::DataLoader& loader, int64_t epoch,
                                      std::vector<int64_t>* sizes = nullptr) {
  std::vector<std::vector<float>> rows;
  EXPECT_TRUE(loader.StartEpoch(epoch).ok());
  yoke::Batch batch;
  while (true) {
    auto more = loader.Next(&batch);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    if (sizes) sizes->push_back(batch.size());
    EXPECT_EQ(batch.epoch(), epoch);
    for (int64_t i = 0; i < batch.size(); ++i) {
      std::vector<float> row(batch.data() + i * 4, batch.data() + (i + 1) * 4);
      row.push_back(static_cast<float>(batch.labels()[i]));
      rows.push_back(row);
    }
  }
  return rows;
}

yoke::DataLoader Open(int rank, int world, uint64_t seed, int64_t batch_size = 4) {
  yoke::DataLoaderOptions o;
  o.batch_size = batch_size;
  o.seed = seed;
  o.rank = rank;
  o.world_size = world;
  auto l = yoke::DataLoader::FromYaml(kSynthetic, "train", o);
  EXPECT_TRUE(l.ok()) << l.status();
  return std::move(*l);
}

TEST(DataLoaderTest, ShufflesBySeedAndEpochAndCoversTheEpoch) {
  yoke::DataLoader a = Open(0, 1, 1), b = Open(0, 1, 1), c = Open(0, 1, 2);
  EXPECT_EQ(a.size(), 10);
  EXPECT_EQ(a.steps_per_epoch(), 3);
  std::vector<int64_t> sizes;
  const auto a0 = Epoch(a, 0, &sizes);
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));  // the short last batch is kept
  EXPECT_EQ(a0, Epoch(b, 0));                         // same seed, same epoch: same order
  EXPECT_NE(a0, Epoch(a, 1));                         // another epoch: another order
  EXPECT_NE(a0, Epoch(c, 0));                         // another seed: another order
  auto sorted = a0, sorted1 = Epoch(a, 1);
  std::sort(sorted.begin(), sorted.end());
  std::sort(sorted1.begin(), sorted1.end());
  EXPECT_EQ(sorted, sorted1);  // each epoch is the whole dataset once
}

// Two ranks' slices of each global batch are disjoint and together are the
// one-rank batch.
TEST(DataLoaderTest, RanksSliceTheGlobalBatch) {
  yoke::DataLoader whole = Open(0, 1, 3), r0 = Open(0, 2, 3), r1 = Open(1, 2, 3);
  std::vector<int64_t> s0, s1;
  const auto all = Epoch(whole, 2), part0 = Epoch(r0, 2, &s0), part1 = Epoch(r1, 2, &s1);
  EXPECT_EQ(s0, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(s1, (std::vector<int64_t>{2, 2, 1}));
  std::vector<std::vector<float>> merged;
  size_t i0 = 0, i1 = 0;
  for (size_t step = 0; step < s0.size(); ++step) {
    for (int64_t k = 0; k < s0[step]; ++k) merged.push_back(part0[i0++]);
    for (int64_t k = 0; k < s1[step]; ++k) merged.push_back(part1[i1++]);
  }
  EXPECT_EQ(merged, all);
}

TEST(DataLoaderTest, ClearErrors) {
  yoke::DataLoaderOptions o;
  auto no_test = yoke::DataLoader::FromYaml(kSynthetic, "test", o);
  ASSERT_FALSE(no_test.ok());
  EXPECT_NE(no_test.status().message().find("data.test"), std::string::npos) << no_test.status();
  auto split = yoke::DataLoader::FromYaml(kSynthetic, "validation", o);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  auto missing = yoke::DataLoader::FromYaml(
      "data: {train: {format: idx, images: /nonexistent/x.gz, labels: /nonexistent/y.gz}}", "train",
      o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("data.train: /nonexistent/"), std::string::npos)
      << missing.status();
  o.rank = 2;
  o.world_size = 2;
  EXPECT_EQ(yoke::DataLoader::FromYaml(kSynthetic, "train", o).status().code(),
            absl::StatusCode::kInvalidArgument);
  yoke::DataLoader l = Open(0, 1, 1);
  yoke::Batch b;
  EXPECT_EQ(l.Next(&b).status().code(), absl::StatusCode::kFailedPrecondition);
}

// The real files, as a job reads them: 10,000 test images in 10 classes,
// bytes scaled to [0, 1] by the section's transform; Evaluate sees them all.
TEST(DataLoaderTest, FashionMnistTestSplitAndEvaluate) {
  const std::string d = "/usr/share/datasets/fashion-mnist/";
  const std::string yaml = "data:\n  test: {format: idx, images: " + d +
                           "t10k-images-idx3-ubyte.gz, labels: " + d +
                           "t10k-labels-idx1-ubyte.gz}\n  transform: {divisor: 255}\n";
  yoke::DataLoaderOptions o;
  o.batch_size = 1000;
  o.shuffle = false;
  auto test = yoke::DataLoader::FromYaml(yaml, "test", o);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->num_classes(), 10);
  EXPECT_EQ(test->example_shape(), (std::vector<int64_t>{28, 28, 1}));
  ASSERT_TRUE(test->StartEpoch(0).ok());
  yoke::Batch b;
  ASSERT_TRUE(*test->Next(&b));
  const auto [lo, hi] = std::minmax_element(b.data(), b.data() + b.size() * 784);
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  auto model = yoke::Model::FromZoo("mlp", test->example_shape(), 10, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  auto eval = yoke::Evaluate(*model, *test);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->count, 10000);
  // An untrained 10-class model is near chance, and its loss near ln 10.
  EXPECT_LT(eval->accuracy, 0.3);
  EXPECT_NEAR(eval->loss, 2.3, 0.5);
  EXPECT_TRUE(model->training());  // Evaluate restored the mode
}

}  // namespace
