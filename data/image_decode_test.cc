#include "data/image_decode.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

using ::testing::HasSubstr;

// A smooth gradient with some texture: JPEG keeps it close.
Image Pattern(int64_t h, int64_t w, int c) {
  Image img;
  img.height = h;
  img.width = w;
  img.channels = c;
  img.pixels.resize(h * w * c);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      for (int k = 0; k < c; ++k) {
        img.pixels[(y * w + x) * c + k] = static_cast<uint8_t>((y * 3 + x * 2 + k * 40) % 256);
      }
    }
  }
  return img;
}

int MaxDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
  return m;
}

TEST(ImageDecodeTest, PngRoundTripsExactly) {
  for (int c : {1, 3}) {
    Image img = Pattern(17, 23, c);
    auto png = EncodePng(img);
    ASSERT_TRUE(png.ok()) << png.status();
    auto back = DecodeImage(png->data(), png->size(), c);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->height, 17);
    EXPECT_EQ(back->width, 23);
    EXPECT_EQ(back->channels, c);
    EXPECT_EQ(back->pixels, img.pixels);
  }
}

TEST(ImageDecodeTest, JpegDecodesCloseToTheSource) {
  for (int c : {1, 3}) {
    Image img = Pattern(32, 40, c);
    auto jpg = EncodeJpeg(img, 95);
    ASSERT_TRUE(jpg.ok()) << jpg.status();
    auto back = DecodeImage(jpg->data(), jpg->size(), c);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->height, 32);
    EXPECT_EQ(back->width, 40);
    ASSERT_EQ(back->pixels.size(), img.pixels.size());
    EXPECT_LE(MaxDiff(back->pixels, img.pixels), 12) << "channels " << c;
  }
}

TEST(ImageDecodeTest, ConvertsBetweenGrayAndRgb) {
  Image gray = Pattern(5, 6, 1);
  auto png = EncodePng(gray);
  ASSERT_TRUE(png.ok());
  auto rgb = DecodeImage(png->data(), png->size(), 3);
  ASSERT_TRUE(rgb.ok()) << rgb.status();
  for (size_t i = 0; i < gray.pixels.size(); ++i) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(rgb->pixels[3 * i + k], gray.pixels[i]);
  }
  Image color = Pattern(5, 6, 3);
  png = EncodePng(color);
  ASSERT_TRUE(png.ok());
  auto g = DecodeImage(png->data(), png->size(), 1);
  ASSERT_TRUE(g.ok()) << g.status();
  for (size_t i = 0; i < g->pixels.size(); ++i) {
    const uint8_t* p = color.pixels.data() + 3 * i;
    EXPECT_EQ(g->pixels[i], (19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 32768u) >> 16);
  }
}

TEST(ImageDecodeTest, RejectsGarbageTruncationAndEmptyInput) {
  const std::string junk = "this is not an image at all";
  EXPECT_THAT(std::string(DecodeImage(junk.data(), junk.size(), 1).status().message()),
              HasSubstr("not a JPEG or PNG"));
  EXPECT_THAT(std::string(DecodeImage("", 0, 1).status().message()), HasSubstr("empty"));
  Image img = Pattern(40, 40, 3);
  for (bool jpeg : {false, true}) {
    auto bytes = jpeg ? EncodeJpeg(img, 95) : EncodePng(img);
    ASSERT_TRUE(bytes.ok());
    for (size_t keep : {size_t{4}, size_t{20}, bytes->size() / 2, bytes->size() - 3}) {
      auto r = DecodeImage(bytes->data(), keep, 3);
      EXPECT_FALSE(r.ok()) << (jpeg ? "jpeg" : "png") << " cut to " << keep;
    }
    // A flipped byte in the middle of a PNG breaks its CRC.
    if (!jpeg) {
      std::string bad = *bytes;
      bad[bad.size() / 2] ^= 0x55;
      EXPECT_FALSE(DecodeImage(bad.data(), bad.size(), 3).ok());
    }
  }
  EXPECT_FALSE(DecodeImage(junk.data(), junk.size(), 2).ok());
}

// A JPEG header may claim any size; a huge one is refused before its pixels
// are allocated.
TEST(ImageDecodeTest, RefusesHugeImagesFromTheHeader) {
  auto jpg = EncodeJpeg(Pattern(8, 8, 1), 90);
  ASSERT_TRUE(jpg.ok());
  std::string big = *jpg;
  const size_t sof = big.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  // SOF0: marker, length (2), precision (1), height (2), width (2).
  for (size_t k : {sof + 5, sof + 7}) {
    big[k] = static_cast<char>(9000 >> 8);
    big[k + 1] = static_cast<char>(9000 & 0xFF);
  }
  auto r = DecodeImage(big.data(), big.size(), 3);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("9000x9000"));
}

TEST(ImageDecodeTest, ResizeSameSizeIsTheIdentity) {
  Image img = Pattern(9, 7, 3);
  std::vector<uint8_t> out(img.pixels.size());
  ResizeImage(img.pixels.data(), 9, 7, 3, out.data(), 9, 7);
  EXPECT_EQ(out, img.pixels);
}

TEST(ImageDecodeTest, ResizeKeepsAConstantImageAndAntialiasesWhenShrinking) {
  std::vector<uint8_t> flat(10 * 12, 77), out(3 * 5);
  ResizeImage(flat.data(), 10, 12, 1, out.data(), 3, 5);
  for (uint8_t v : out) EXPECT_EQ(v, 77);
  std::vector<uint8_t> up(25 * 31);
  ResizeImage(flat.data(), 10, 12, 1, up.data(), 25, 31);
  for (uint8_t v : up) EXPECT_EQ(v, 77);

  // 1x4 -> 1x2: the triangle's radius is the shrink factor 2, so output 0
  // (centre 1.0) weighs inputs 0, 1, 2 by 3/4, 3/4, 1/4 (input -1 is off the
  // edge): plain bilinear would weigh only inputs 0 and 1.
  const uint8_t row[4] = {0, 0, 0, 175};
  uint8_t two[2];
  ResizeImage(row, 1, 4, 1, two, 1, 2);
  EXPECT_EQ(two[0], 0);
  EXPECT_EQ(two[1], 75);  // 175 * 0.75 / 1.75
  const uint8_t spike[4] = {0, 0, 140, 0};
  ResizeImage(spike, 1, 4, 1, two, 1, 2);
  EXPECT_EQ(two[0], 20);  // 140 * 0.25 / 1.75
  EXPECT_EQ(two[1], 60);  // 140 * 0.75 / 1.75

  // Enlarging 1x2 -> 1x4 is plain bilinear: centres at 0.25, 0.75, ...
  const uint8_t pair[2] = {0, 200};
  uint8_t four[4];
  ResizeImage(pair, 1, 2, 1, four, 1, 4);
  EXPECT_EQ(four[0], 0);
  EXPECT_EQ(four[1], 50);
  EXPECT_EQ(four[2], 150);
  EXPECT_EQ(four[3], 200);
}

}  // namespace
}  // namespace yoke::data
