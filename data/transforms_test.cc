#include "data/transforms.h"

#include <functional>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

using ::testing::HasSubstr;

Transform Make(const v1::TransformSpec& spec, std::vector<int64_t> shape, uint64_t seed = 0) {
  auto t = Transform::Create(spec, shape, seed);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

TEST(TransformTest, NormalisesPerChannelByHand) {
  v1::TransformSpec spec;
  spec.set_divisor(255);
  for (float m : {0.5f, 0.4f, 0.3f}) spec.add_mean(m);
  for (float s : {0.25f, 0.2f, 0.1f}) spec.add_std(s);
  Transform t = Make(spec, {1, 2, 3});
  const uint8_t src[6] = {0, 51, 102, 153, 204, 255};
  float dst[6];
  t.Apply(src, dst, 0, 0, /*train=*/true);
  // (v/255 - mean[c]) / std[c]: (0-.5)/.25, (.2-.4)/.2, (.4-.3)/.1, (.6-.5)/.25,
  // (.8-.4)/.2, (1-.3)/.1.
  const float want[6] = {-2, -1, 1, 0.4f, 2, 7};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(dst[i], want[i], 1e-5) << i;
}

TEST(TransformTest, OneValueForAllChannelsAndFloatInput) {
  v1::TransformSpec spec;
  spec.add_mean(1);
  spec.add_std(2);
  Transform t = Make(spec, {4});  // a (D) feature vector
  const float src[4] = {1, 3, -1, 0.5f};
  float dst[4];
  t.Apply(src, dst, 0, 0, false);
  EXPECT_FLOAT_EQ(dst[0], 0);
  EXPECT_FLOAT_EQ(dst[1], 1);
  EXPECT_FLOAT_EQ(dst[2], -1);
  EXPECT_FLOAT_EQ(dst[3], -0.25f);
}

TEST(TransformTest, DefaultIsIdentity) {
  Transform t = Make(v1::TransformSpec(), {2, 2, 1});
  const uint8_t src[4] = {0, 7, 128, 255};
  float dst[4];
  t.Apply(src, dst, 3, 9, true);
  EXPECT_EQ(dst[0], 0);
  EXPECT_EQ(dst[1], 7);
  EXPECT_EQ(dst[2], 128);
  EXPECT_EQ(dst[3], 255);
  EXPECT_FALSE(t.augments());
}

TEST(TransformTest, Validation) {
  v1::TransformSpec spec;
  spec.add_mean(0.1f);
  spec.add_mean(0.2f);
  auto t = Transform::Create(spec, {32, 32, 3}, 0);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(),
            "data.transform.mean: needs 1 value or one per channel (3), got 2");
  spec.Clear();
  spec.add_std(1);
  spec.add_std(0);
  spec.add_std(1);
  EXPECT_EQ(Transform::Create(spec, {32, 32, 3}, 0).status().message(),
            "data.transform.std[1]: must be > 0, got 0");
  spec.Clear();
  spec.set_divisor(-255);
  EXPECT_THAT(std::string(Transform::Create(spec, {4}, 0).status().message()),
              HasSubstr("data.transform.divisor: must be > 0"));
  spec.Clear();
  spec.set_random_crop_padding(4);
  EXPECT_EQ(Transform::Create(spec, {10}, 0, "data.transform").status().message(),
            "data.transform.random_crop_padding: needs (H, W, C) examples, got shape (10)");
  spec.set_random_crop_padding(-1);
  EXPECT_THAT(std::string(Transform::Create(spec, {4, 4, 1}, 0).status().message()),
              HasSubstr("random_crop_padding: must be >= 0, got -1"));
  spec.Clear();
  spec.set_horizontal_flip(true);
  EXPECT_THAT(std::string(Transform::Create(spec, {4, 4}, 0).status().message()),
              HasSubstr("data.transform.horizontal_flip: needs (H, W, C)"));
}

// Finds an example index whose draw in epoch 0 satisfies `want`.
int64_t FindIndex(const Transform& t, const std::function<bool(Transform::Augmentation)>& want) {
  for (int64_t i = 0; i < 100000; ++i) {
    if (want(t.Draw(0, i))) return i;
  }
  ADD_FAILURE() << "no index with the wanted draw";
  return 0;
}

TEST(TransformTest, CropAndFlipByHand) {
  v1::TransformSpec spec;
  spec.set_random_crop_padding(1);
  spec.set_horizontal_flip(true);
  Transform t = Make(spec, {2, 3, 1}, 5);
  // 1 2 3
  // 4 5 6
  const uint8_t src[6] = {1, 2, 3, 4, 5, 6};
  struct Case {
    int cy, cx;
    bool flip;
    std::vector<float> want;
  };
  // Pad by one zero on every side, cut a 2x3 window at (cy, cx), then flip.
  const Case cases[] = {
      {1, 1, false, {1, 2, 3, 4, 5, 6}}, {1, 1, true, {3, 2, 1, 6, 5, 4}},
      {0, 0, false, {0, 0, 0, 0, 1, 2}}, {2, 2, false, {5, 6, 0, 0, 0, 0}},
      {0, 2, true, {0, 0, 0, 0, 3, 2}},  {2, 0, true, {5, 4, 0, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    const int64_t i = FindIndex(t, [&](Transform::Augmentation a) {
      return a.crop_y == c.cy && a.crop_x == c.cx && a.flip == c.flip;
    });
    std::vector<float> dst(6);
    t.Apply(src, dst.data(), 0, i, /*train=*/true);
    EXPECT_EQ(dst, c.want) << "crop (" << c.cy << ", " << c.cx << ") flip " << c.flip;
    // Evaluation never augments.
    t.Apply(src, dst.data(), 0, i, /*train=*/false);
    EXPECT_EQ(dst, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  }
}

TEST(TransformTest, PaddingIsZeroBeforeNormalisation) {
  v1::TransformSpec spec;
  spec.set_random_crop_padding(1);
  spec.set_divisor(2);
  spec.add_mean(1);
  spec.add_mean(2);
  spec.add_std(4);
  spec.add_std(8);
  Transform t = Make(spec, {1, 1, 2});
  const int64_t i = FindIndex(t, [](Transform::Augmentation a) { return a.crop_y == 0; });
  const uint8_t src[2] = {10, 20};
  float dst[2];
  t.Apply(src, dst, 0, i, true);
  EXPECT_FLOAT_EQ(dst[0], -0.25f);  // (0/2 - 1) / 4
  EXPECT_FLOAT_EQ(dst[1], -0.25f);  // (0/2 - 2) / 8
  const int64_t j =
      FindIndex(t, [](Transform::Augmentation a) { return a.crop_y == 1 && a.crop_x == 1; });
  t.Apply(src, dst, 0, j, true);
  EXPECT_FLOAT_EQ(dst[0], 1.0f);  // (10/2 - 1) / 4
  EXPECT_FLOAT_EQ(dst[1], 1.0f);  // (20/2 - 2) / 8
}

TEST(TransformTest, DrawsArePureAndSpread) {
  v1::TransformSpec spec;
  spec.set_random_crop_padding(4);
  spec.set_horizontal_flip(true);
  Transform a = Make(spec, {32, 32, 3}, 77), b = Make(spec, {32, 32, 3}, 77),
            c = Make(spec, {32, 32, 3}, 78);
  std::set<std::pair<int, int>> offsets;
  int flips = 0, same_as_other_seed = 0, same_as_next_epoch = 0;
  for (int64_t i = 0; i < 4000; ++i) {
    const auto da = a.Draw(3, i), db = b.Draw(3, i), dc = c.Draw(3, i), dn = a.Draw(4, i);
    ASSERT_EQ(da.crop_y, db.crop_y);
    ASSERT_EQ(da.crop_x, db.crop_x);
    ASSERT_EQ(da.flip, db.flip);
    ASSERT_GE(da.crop_y, 0);
    ASSERT_LE(da.crop_y, 8);
    ASSERT_GE(da.crop_x, 0);
    ASSERT_LE(da.crop_x, 8);
    offsets.insert({da.crop_y, da.crop_x});
    flips += da.flip;
    same_as_other_seed += da.crop_y == dc.crop_y && da.crop_x == dc.crop_x && da.flip == dc.flip;
    same_as_next_epoch += da.crop_y == dn.crop_y && da.crop_x == dn.crop_x && da.flip == dn.flip;
  }
  EXPECT_EQ(offsets.size(), 81u);
  EXPECT_NEAR(flips, 2000, 200);
  // Chance agreement is 1/162 (~25 of 4000).
  EXPECT_LT(same_as_other_seed, 80);
  EXPECT_LT(same_as_next_epoch, 80);
}

}  // namespace
}  // namespace yoke::data
