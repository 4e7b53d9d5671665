#include "data/synthetic_dataset.h"

#include <cmath>
#include <cstring>

#include "data/names/format_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Dataset> Make(std::vector<int64_t> shape, int classes, int64_t n, uint64_t seed) {
  SyntheticOptions o;
  o.shape = std::move(shape);
  o.num_classes = classes;
  o.num_examples = n;
  o.seed = seed;
  auto ds = MakeSynthetic(o);
  EXPECT_TRUE(ds.ok()) << ds.status();
  return ds.ok() ? std::move(ds).value() : nullptr;
}

std::vector<uint8_t> Bytes(const Dataset& d, int64_t i) {
  std::vector<uint8_t> scratch(d.example_bytes());
  const auto* p = static_cast<const uint8_t*>(d.Example(i, scratch.data()));
  return std::vector<uint8_t>(p, p + d.example_numel());
}

TEST(SyntheticDatasetTest, DeterministicAndDistinct) {
  auto a = Make({5, 3, 3}, 7, 1000000, 42);  // 45 values: not a multiple of 8
  auto b = Make({5, 3, 3}, 7, 1000000, 42);
  auto c = Make({5, 3, 3}, 7, 1000000, 43);
  EXPECT_EQ(a->size(), 1000000);
  EXPECT_EQ(a->example_shape(), (std::vector<int64_t>{5, 3, 3}));
  EXPECT_EQ(a->element_type(), ElementType::kU8);
  for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{999999}}) {
    EXPECT_EQ(Bytes(*a, i), Bytes(*b, i));
    EXPECT_EQ(a->Label(i), b->Label(i));
    EXPECT_NE(Bytes(*a, i), Bytes(*c, i));
  }
  EXPECT_NE(Bytes(*a, 0), Bytes(*a, 1));
  // The tail bytes past the last full 8-byte word vary too.
  int tail_diffs = 0;
  for (int i = 0; i < 20; ++i) tail_diffs += Bytes(*a, i)[44] != Bytes(*a, i + 1)[44];
  EXPECT_GT(tail_diffs, 10);
}

TEST(SyntheticDatasetTest, RoughlyUniform) {
  auto d = Make({16, 16, 3}, 10, 2000, 1);
  std::vector<int64_t> byte_counts(256), label_counts(10);
  for (int64_t i = 0; i < d->size(); ++i) {
    for (uint8_t v : Bytes(*d, i)) byte_counts[v]++;
    const int32_t l = d->Label(i);
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    label_counts[l]++;
  }
  const double per_byte = 2000.0 * 768 / 256;  // 6000, sd ~ 77
  for (int v = 0; v < 256; ++v) EXPECT_NEAR(byte_counts[v], per_byte, 8 * std::sqrt(per_byte));
  for (int l = 0; l < 10; ++l) EXPECT_NEAR(label_counts[l], 200, 8 * std::sqrt(200.0));
}

TEST(SyntheticDatasetTest, BadOptions) {
  SyntheticOptions o;
  o.num_examples = 10;
  EXPECT_THAT(std::string(MakeSynthetic(o).status().message()), HasSubstr("shape: required"));
  o.shape = {4, 0};
  EXPECT_THAT(std::string(MakeSynthetic(o).status().message()), HasSubstr("shape: (4, 0)"));
  o.shape = {4};
  o.num_classes = 0;
  EXPECT_THAT(std::string(MakeSynthetic(o).status().message()),
              HasSubstr("num_classes: must be > 0, got 0"));
  o.num_classes = 2;
  o.num_examples = 0;
  EXPECT_THAT(std::string(MakeSynthetic(o).status().message()),
              HasSubstr("num_examples: must be > 0, got 0"));
  o.num_examples = 1;
  o.shape = {1 << 20, 1 << 20};
  EXPECT_EQ(MakeSynthetic(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// The bound job validation applies at submit (jobspec/job_validate_test.cc
// tests the same two shapes), so a spec it accepts opens here.
TEST(SyntheticDatasetTest, TheExampleSizeBoundIsTheSharedOne) {
  static_assert(kMaxSyntheticExampleValues == int64_t{1024} * 1024 * 1024);
  SyntheticOptions o;
  o.num_classes = 2;
  o.num_examples = 1;
  o.shape = {1024, 1024, 1024};
  EXPECT_TRUE(MakeSynthetic(o).ok()) << MakeSynthetic(o).status();
  o.shape = {1024, 1024, 1025};
  EXPECT_EQ(MakeSynthetic(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoke::data
