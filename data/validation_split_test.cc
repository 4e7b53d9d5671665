#include "data/validation_split.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace yoke::data {
namespace {

TEST(ValidationSplitTest, PartsAreDisjointCoverEverythingAndHaveTheFraction) {
  const int64_t n = 1003;
  auto s = SplitForValidation(n, 0.2, 7);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->validation.size(), 200u);  // floor(0.2 * 1003)
  EXPECT_EQ(s->train.size() + s->validation.size(), static_cast<size_t>(n));
  std::set<int64_t> all(s->train.begin(), s->train.end());
  for (int64_t i : s->validation) EXPECT_TRUE(all.insert(i).second) << i << " is in both";
  EXPECT_EQ(all.size(), static_cast<size_t>(n));
  EXPECT_EQ(*all.begin(), 0);
  EXPECT_EQ(*all.rbegin(), n - 1);
  // Held out at random, not a block at either end.
  EXPECT_LT(s->validation.front(), 50);
  EXPECT_GT(s->validation.back(), n - 50);
}

TEST(ValidationSplitTest, DeterministicPerSeed) {
  auto a = SplitForValidation(500, 0.1, 3), b = SplitForValidation(500, 0.1, 3);
  auto c = SplitForValidation(500, 0.1, 4);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->validation, b->validation);
  EXPECT_EQ(a->train, b->train);
  EXPECT_NE(a->validation, c->validation);
}

TEST(ValidationSplitTest, RejectsFractionsThatLeaveAPartEmpty) {
  for (double f : {0.0, 1.0, -0.5}) {
    auto s = SplitForValidation(100, f, 0);
    ASSERT_FALSE(s.ok()) << f;
    EXPECT_NE(std::string(s.status().message()).find("data.validation_split"), std::string::npos);
  }
  auto none = SplitForValidation(5, 0.1, 0);  // floor(0.5) = 0 held out
  ASSERT_FALSE(none.ok());
  EXPECT_NE(std::string(none.status().message()).find("no validation"), std::string::npos)
      << none.status();
  auto all = SplitForValidation(2, 0.99, 0);  // floor(1.98) = 1 of 2: fine
  EXPECT_TRUE(all.ok()) << all.status();
}

TEST(ValidationSplitTest, SubsetReadsTheChosenExamples) {
  // Example i holds the value 10 * i, label i % 3.
  std::vector<uint8_t> values;
  std::vector<int32_t> labels;
  for (int i = 0; i < 6; ++i) {
    values.push_back(static_cast<uint8_t>(10 * i));
    labels.push_back(i % 3);
  }
  auto base = std::make_shared<ByteDataset>(std::vector<int64_t>{1}, 3, values, labels);
  auto sub = Subset(base, {4, 1});
  ASSERT_EQ(sub->size(), 2);
  EXPECT_EQ(sub->num_classes(), 3);
  EXPECT_EQ(*static_cast<const uint8_t*>(sub->Example(0, nullptr)), 40);
  EXPECT_EQ(*static_cast<const uint8_t*>(sub->Example(1, nullptr)), 10);
  EXPECT_EQ(sub->Label(0), 1);
  EXPECT_EQ(sub->Label(1), 1);
}

}  // namespace
}  // namespace yoke::data
