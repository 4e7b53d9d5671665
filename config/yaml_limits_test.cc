#include "config/yaml_limits.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::common {
namespace {

using ::testing::HasSubstr;

TEST(YamlLimitsTest, OrdinaryJobFilesPass) {
  EXPECT_TRUE(CheckYamlLimits(R"(
name: mlp  # a comment with [ and {
model:
  layers:
    - dense: {units: 128}
    - relu: {}
    - dense: {units: 10}
data:
  train: {format: idx, images: "/d/[x", labels: '/d/{y'}
)",
                              "job.yaml")
                  .ok());
}

TEST(YamlLimitsTest, DeepFlowNestingIsRefusedWithTheLine) {
  const std::string deep = "a:\n  b: " + std::string(64, '[') + std::string(64, ']') + "\n";
  const absl::Status s = CheckYamlLimits(deep, "job.yaml");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("job.yaml:2: YAML nested 65 levels deep"));
  // 62 brackets under two block levels is exactly the limit.
  EXPECT_TRUE(CheckYamlLimits("a:\n  b: " + std::string(62, '[') + std::string(62, ']'), "j").ok());
}

TEST(YamlLimitsTest, DeepBlockNestingIsRefused) {
  std::string deep;
  for (int i = 0; i < 70; ++i) deep += std::string(i, ' ') + "k:\n";
  EXPECT_THAT(std::string(CheckYamlLimits(deep, "c.yaml").message()),
              HasSubstr("c.yaml:65: YAML nested 65 levels deep"));
  std::string dashes;
  for (int i = 0; i < 70; ++i) dashes += "- ";
  EXPECT_FALSE(CheckYamlLimits(dashes + "x\n", "d.yaml").ok());
}

TEST(YamlLimitsTest, BracketsInQuotesAndCommentsDoNotCount) {
  const std::string s = "a: \"" + std::string(200, '[') + "\"\nb: x # " + std::string(200, '{');
  EXPECT_TRUE(CheckYamlLimits(s, "j").ok());
}

TEST(YamlLimitsTest, TextOver8MiBIsRefusedBeforeParsing) {
  const std::string big = "a: [" + std::string(8 << 20, '1') + "]";
  const absl::Status s = CheckYamlLimits(big, "huge.yaml");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("over the limit of 8388608 (8 MiB)"));
}

}  // namespace
}  // namespace yoke::common
