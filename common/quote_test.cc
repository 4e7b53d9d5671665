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

}  // namespace
}  // namespace yoke::common
