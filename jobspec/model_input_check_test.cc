// The model checks ValidateJobSpec takes from the engine's shape rules
// (engine/shapes/, through model_input_check.h): a written-out layer list is
// refused at submit, with the engine's message and the input's shape, when
// the trainer would refuse to build it. engine/shapes/layer_shapes_test.cc
// has every rule; trainer/shape_rules_agree_test.cc compares with the trainer.
#include "jobspec/model_input_check.h"

#include <string>
#include <vector>

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "jobspec/job_validate.h"

namespace yoke::common {
namespace {

using testing::HasSubstr;

const char kLayersJob[] = R"(
model:
  layers:
    - flatten
    - {name: d1, dense: {units: 4}}
    - relu
    - {name: d2, dense: {units: 4}, inputs: [d1]}
    - {name: sum, add: {}, inputs: [d2, relu_2]}
    - dense: {units: 10}
data:
  train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, num_examples: 100}
training:
  epochs: 1
  batch_size: 8
  optimizer: {type: sgd, lr: 0.1}
)";

std::string Refusal(const std::vector<std::string>& overrides) {
  auto spec = LoadJobSpecString(kLayersJob, overrides, "test.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return "";
  const absl::Status s = ValidateJobSpec(*spec);
  if (s.ok()) return "accepted";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

TEST(ModelInputCheckTest, AGoodListIsAccepted) {
  EXPECT_EQ(Refusal({}), "accepted");
  EXPECT_EQ(Refusal({"model.layers=[{conv2d: {filters: 2, kernel: 28, padding: valid}}, flatten, "
                     "{dense: {units: 10}}]"}),
            "accepted");
}

TEST(ModelInputCheckTest, ShapeRulesAreRefusedWithTheEnginesMessage) {
  EXPECT_EQ(
      Refusal({"model.layers[0]={conv2d: {filters: 2, kernel: 28, padding: valid}}",
               "model.layers[1]={name: d1, dense: {units: 4}, inputs: [conv2d_0]}"}),
      "model.layers[1] (d1): dense expects 1 input of rank 1 (features), got (1, 1, 2); add a "
      "flatten layer before it (data.train.shape [28, 28, 1])");
  EXPECT_EQ(Refusal({"model.layers[5].dense.units=7"}),
            "model.layers: the last layer must output (10) logits, one per class; it outputs (7) "
            "(data.train.shape [28, 28, 1])");
  EXPECT_EQ(Refusal({"model.layers[0]={conv2d: {filters: 2, kernel: 29, padding: valid}}"}),
            "model.layers[0] (conv2d_0): conv2d: a 29x29 window with padding 'valid' does not fit "
            "input (28, 28, 1); use padding 'same' or a smaller kernel (data.train.shape [28, 28, "
            "1])");
  EXPECT_THAT(Refusal({"model.layers[0]=relu"}),
              HasSubstr("model.layers[1] (d1): dense expects 1 input of rank 1 (features), got "
                        "(28, 28, 1); add a flatten layer before it"));
  EXPECT_THAT(Refusal({"model.layers[3].dense.units=5"}),
              HasSubstr("model.layers[4] (sum): add expects inputs of identical shape: input 0 "
                        "is (5) but input 1 is (4)"));
}

TEST(ModelInputCheckTest, AnUnreadOutputIsRefusedWhateverTheData) {
  const std::string unread = "model.layers[4].inputs=[d2, d1]";
  EXPECT_EQ(Refusal({unread}),
            "model.layers[2] (relu_2): its output is never used; only the last layer may be "
            "unconsumed (data.train.shape [28, 28, 1])");
  // An IDX set's shape is in its files: the graph is still checked.
  EXPECT_THAT(Refusal({unread, "data.train={format: idx, images: /d/i.gz, labels: /d/l.gz}"}),
              HasSubstr("model.layers[2] (relu_2): its output is never used"));
  // ...and nothing that needs the shape.
  EXPECT_EQ(Refusal({"model.layers[5].dense.units=7",
                     "data.train={format: idx, images: /d/i.gz, labels: /d/l.gz}"}),
            "accepted");
}

TEST(ModelInputCheckTest, ArgumentRulesAreTheEnginesToo) {
  EXPECT_THAT(Refusal({"model.layers[1].dense.units=0"}),
              HasSubstr("model.layers[1].dense.units: must be > 0, got 0"));
  EXPECT_THAT(Refusal({"model.layers[0]={max_pool2d: {padding: \"a\\x1b[2J\"}}"}),
              HasSubstr("model.layers[0].max_pool2d.padding: unknown padding 'a\\x1b[2J'"));
}

// Found by job_spec_yaml_fuzz: a split that holds out nothing of a small
// synthetic set, which the trainer refused.
TEST(ModelInputCheckTest, AValidationSplitOfASyntheticSetMustHoldOutSomething) {
  EXPECT_EQ(Refusal({"data.train.num_examples=3", "data.validation_split=0.25"}),
            "data.validation_split: 0.25 of the 3 training examples holds out 0, leaving no "
            "validation examples; use a larger fraction or more data");
  EXPECT_EQ(Refusal({"data.train.num_examples=4", "data.validation_split=0.25"}), "accepted");
}

}  // namespace
}  // namespace yoke::common
