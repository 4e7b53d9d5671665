#include "collective/half.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace yoke::collective {
namespace {

TEST(HalfTest, KnownF16Values) {
  EXPECT_EQ(F32ToF16Scalar(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16Scalar(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16Scalar(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16Scalar(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16Scalar(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16Scalar(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(F32ToF16Scalar(INFINITY), 0x7c00);
  EXPECT_EQ(F32ToF16Scalar(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(F32ToF16Scalar(std::ldexp(1.0f, -26)), 0x0000);  // below half of it
  // Ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(F32ToF16Scalar(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16Scalar(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(F16ToF32Scalar(F32ToF16Scalar(NAN))));
}

TEST(HalfTest, KnownBF16Values) {
  EXPECT_EQ(F32ToBF16Scalar(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16Scalar(-2.0f), 0xc000);
  EXPECT_EQ(F32ToBF16Scalar(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie to even
  EXPECT_EQ(F32ToBF16Scalar(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie to even
  EXPECT_EQ(BF16ToF32Scalar(0x3f80), 1.0f);
  EXPECT_TRUE(std::isnan(BF16ToF32Scalar(F32ToBF16Scalar(NAN))));
}

TEST(HalfTest, EveryF16RoundTripsAndVectorMatchesScalar) {
  std::vector<uint16_t> h(65536);
  for (int i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> f(h.size());
  F16ToF32(h.data(), f.data(), h.size());
  std::vector<uint16_t> back(h.size());
  F32ToF16(f.data(), back.data(), f.size());
  for (int i = 0; i < 65536; ++i) {
    const bool nan = ((i >> 10) & 0x1f) == 0x1f && (i & 0x3ff) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(f[i]));
      continue;
    }
    const float scalar = F16ToF32Scalar(h[i]);
    ASSERT_EQ(std::memcmp(&f[i], &scalar, 4), 0) << i;
    ASSERT_EQ(back[i], h[i]) << i;
  }
}

TEST(HalfTest, VectorF16ConversionRoundsLikeScalar) {
  std::vector<float> f;
  for (int i = 0; i < 100000; ++i) f.push_back(std::ldexp(std::sin(i * 0.37f), (i % 40) - 25));
  std::vector<uint16_t> v(f.size());
  F32ToF16(f.data(), v.data(), f.size());
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(v[i], F32ToF16Scalar(f[i])) << f[i];
}

TEST(HalfTest, SumsRoundOnce) {
  std::vector<uint16_t> a, b, out(3000), outb(3000);
  for (int i = 0; i < 3000; ++i) {
    a.push_back(F32ToF16Scalar(i * 0.1f));
    b.push_back(F32ToF16Scalar(1.0f / (i + 1)));
  }
  SumF16(out.data(), a.data(), b.data(), a.size());
  std::vector<uint16_t> ab(3000), bb(3000);
  for (int i = 0; i < 3000; ++i) {
    EXPECT_EQ(out[i], F32ToF16Scalar(F16ToF32Scalar(a[i]) + F16ToF32Scalar(b[i]))) << i;
    ab[i] = F32ToBF16Scalar(i * 0.1f);
    bb[i] = F32ToBF16Scalar(1.0f / (i + 1));
  }
  SumBF16(outb.data(), ab.data(), bb.data(), ab.size());
  for (int i = 0; i < 3000; ++i) {
    EXPECT_EQ(outb[i], F32ToBF16Scalar(BF16ToF32Scalar(ab[i]) + BF16ToF32Scalar(bb[i]))) << i;
  }
  // In place (out aliases a).
  SumF16(a.data(), a.data(), b.data(), a.size());
  EXPECT_EQ(a, out);
}

}  // namespace
}  // namespace yoke::collective
