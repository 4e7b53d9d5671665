#include "common/name_list.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

constexpr std::string_view kNames[] = {"a", "bb", "c"};

struct Entry {
  std::string_view name;
  int value;
};

constexpr Entry kSame[] = {{"a", 1}, {"bb", 2}, {"c", 3}};
constexpr Entry kReordered[] = {{"bb", 2}, {"a", 1}, {"c", 3}};
constexpr Entry kShort[] = {{"a", 1}, {"bb", 2}};
constexpr Entry kLong[] = {{"a", 1}, {"bb", 2}, {"c", 3}, {"d", 4}};
constexpr Entry kPrefix[] = {{"a", 1}, {"b", 2}, {"c", 3}};

// Evaluated by the compiler, as a factory's static_assert is.
static_assert(NamesMatch(kSame, kNames));
static_assert(!NamesMatch(kReordered, kNames));

TEST(NameListTest, NamesMatchOnlyTheSameNamesInTheSameOrder) {
  EXPECT_TRUE(NamesMatch(kSame, kNames));
  EXPECT_FALSE(NamesMatch(kReordered, kNames));
  EXPECT_FALSE(NamesMatch(kShort, kNames));
  EXPECT_FALSE(NamesMatch(kLong, kNames));
  EXPECT_FALSE(NamesMatch(kPrefix, kNames));
}

TEST(NameListTest, NameVectorKeepsTheOrder) {
  EXPECT_THAT(NameVector(kNames), testing::ElementsAre("a", "bb", "c"));
}

}  // namespace
}  // namespace yoke::common
