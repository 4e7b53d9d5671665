#include "data/dataset.h"

#include "gtest/gtest.h"

namespace yoke::data {
namespace {

TEST(DatasetTest, InMemoryAndTakeFirst) {
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  auto d =
      std::make_unique<FloatDataset>(std::vector<int64_t>{2}, 4, v, std::vector<int32_t>{3, 0, 2});
  EXPECT_EQ(d->size(), 3);
  EXPECT_EQ(d->example_numel(), 2);
  EXPECT_EQ(d->example_bytes(), 8u);
  EXPECT_EQ(d->element_type(), ElementType::kF32);
  float f[2];
  d->ExampleAsFloat(2, f);
  EXPECT_EQ(f[0], 5);
  EXPECT_EQ(f[1], 6);

  std::unique_ptr<Dataset> first = TakeFirst(std::move(d), 2);
  EXPECT_EQ(first->size(), 2);
  EXPECT_EQ(first->num_classes(), 4);
  EXPECT_EQ(first->Label(1), 0);
  first->ExampleAsFloat(1, f);
  EXPECT_EQ(f[0], 3);
  EXPECT_EQ(ShapeToString({28, 28, 1}), "(28, 28, 1)");
}

}  // namespace
}  // namespace yoke::data
