#include "common/quote.h"

#include <string>

#include "gtest/gtest.h"

namespace yoke::common {
namespace {

TEST(QuoteTest, ShortInputIsShownWhole) { EXPECT_EQ(Quote("relu"), "'relu'"); }

TEST(QuoteTest, LongInputIsCutAndSaysHowMuchWasLeftOut) {
  const std::string big(4'000'000, 'x');
  const std::string q = Quote(big);
  EXPECT_LT(q.size(), 260u);
  EXPECT_EQ(q.substr(0, 201), "'" + std::string(200, 'x'));
  EXPECT_NE(q.find("(+3999800 bytes)"), std::string::npos) << q;
}

TEST(QuoteTest, ControlAndBinaryBytesAreEscaped) {
  const std::string q = Quote(std::string("a\nb\0c\xff", 6));
  EXPECT_EQ(q.find('\n'), std::string::npos);
  EXPECT_EQ(q.find('\0'), std::string::npos);
  EXPECT_NE(q.find("\\n"), std::string::npos) << q;
  EXPECT_NE(q.find("\\xff"), std::string::npos) << q;
}

TEST(QuoteTest, TruncateKeepsShortTextAndCutsLongText) {
  EXPECT_EQ(Truncate("fine", 10), "fine");
  EXPECT_EQ(Truncate("0123456789abc", 10), "0123456789... (+3 bytes)");
}

TEST(QuoteTest, ControlCharsAreFoundInEachRange) {
  EXPECT_FALSE(HasControlChar("mnist-cnn v2 (Zürich, ñ, 日本)"));
  EXPECT_TRUE(HasControlChar("a\x1b]0;owned\ab"));
  EXPECT_TRUE(HasControlChar(std::string("a\0b", 3)));
  EXPECT_TRUE(HasControlChar("tab\there"));
  EXPECT_TRUE(HasControlChar("del\x7f"));
  EXPECT_TRUE(HasControlChar("csi \xc2\x9b"));  // U+009B, the 8-bit CSI
  EXPECT_FALSE(HasControlChar("\xc2\xa0"));     // U+00A0, a no-break space
}

TEST(QuoteTest, EscapeControlLeavesTextAndEscapesEveryControlChar) {
  EXPECT_EQ(EscapeControl("Zürich run 3"), "Zürich run 3");
  const std::string hostile("innocent\x1b]0;owned\a\x1b[2J\x1b[H\0hidden \xc2\x9b", 35);
  const std::string shown = EscapeControl(hostile);
  EXPECT_FALSE(HasControlChar(shown)) << shown;
  EXPECT_EQ(shown, "innocent\\x1b]0;owned\\x07\\x1b[2J\\x1b[H\\x00hidden \\xc2\\x9b");
}

TEST(QuoteTest, EscapeControlKeepsTheBytesItIsTold) {
  EXPECT_EQ(EscapeControl("a\tb\nc\x1b[2J\n", "\n"), "a\\tb\nc\\x1b[2J\n");
}

}  // namespace
}  // namespace yoke::common
