// Job validation (what the coordinator runs at submit) and the trainer agree
// on the model of every spec below: each is accepted by both or refused by
// both, and where both refuse, the validator says what the trainer would
// (both run engine/shapes/). tests/fuzz/job_spec_yaml_fuzz.cc asserts the
// same invariant on arbitrary specs; these are the cases it must never find.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "config/config.h"
#include "gtest/gtest.h"
#include "jobspec/job_validate.h"
#include "trainer/trainer.h"

namespace yoke::worker {
namespace {

struct Case {
  const char* what;
  const char* model;    // the YAML of the model section
  const char* shape;    // data.train.shape
  bool accepted;        // by both
  const char* message;  // for a refusal: a part of both messages
};

const Case kCases[] = {
    {"a conv chain",
     "layers: [{conv2d: {filters: 4, kernel: 3}}, relu, max_pool2d, flatten, "
     "{dense: {units: 3}}]",
     "[8, 8, 1]", true, ""},
    {"a residual graph",
     "layers: [flatten, {name: a, dense: {units: 4}}, {name: b, dense: {units: "
     "4}}, {add: {}, inputs: [a, b]}, {batch_norm: {}}, {dense: {units: 3}}, softmax]",
     "[5]", true, ""},
    {"same padding larger than the input",
     "layers: [{max_pool2d: {size: 5, padding: same}}, "
     "{conv2d: {filters: 3, kernel: 9, stride: 4}}, global_avg_pool]",
     "[3, 2, 2]", true, ""},
    {"a zoo model", "zoo: mlp\nhidden: [4]", "[4, 4, 1]", true, ""},
    {"a kernel larger than its input",
     "layers: [{conv2d: {filters: 2, kernel: 5, padding: "
     "valid}}, flatten, {dense: {units: 3}}]",
     "[3, 3, 1]", false,
     "model.layers[0] (conv2d_0): conv2d: a 5x5 window with padding 'valid' does not fit input "
     "(3, 3, 1)"},
    {"a pool larger than its input",
     "layers: [{avg_pool2d: {size: 4}}, flatten, {dense: "
     "{units: 3}}]",
     "[3, 3, 1]", false, "avg_pool2d: a 4x4 window with padding 'valid'"},
    {"a dense layer on an image", "layers: [{dense: {units: 3}}]", "[4, 4, 1]", false,
     "model.layers[0] (dense_0): dense expects 1 input of rank 1 (features), got (4, 4, 1)"},
    {"a conv on a flat input",
     "layers: [{conv2d: {filters: 3, kernel: 1}}, flatten, {dense: "
     "{units: 3}}]",
     "[6]", false, "conv2d expects 1 input of rank 3 (H, W, C), got (6)"},
    {"a global pool on a flat input", "layers: [global_avg_pool, {dense: {units: 3}}]", "[6]",
     false, "global_avg_pool expects 1 input of rank 3"},
    {"an add of two shapes",
     "layers: [{name: a, dense: {units: 4}}, {name: b, dense: {units: "
     "5}, inputs: [input]}, {add: {}, inputs: [a, b]}, {dense: {units: 3}}]",
     "[6]", false,
     "model.layers[2] (add_2): add expects inputs of identical shape: input 0 is (4) but input 1 "
     "is (5)"},
    {"too few logits", "layers: [flatten, {dense: {units: 7}}]", "[4, 4, 1]", false,
     "model.layers: the last layer must output (3) logits, one per class; it outputs (7)"},
    {"an image for logits", "layers: [{conv2d: {filters: 3, kernel: 1}}]", "[4, 4, 1]", false,
     "it outputs (4, 4, 3)"},
    {"an output nobody reads",
     "layers: [{name: a, dense: {units: 4}}, {dense: {units: 3}, "
     "inputs: [input]}]",
     "[6]", false,
     "model.layers[0] (a): its output is never used; only the last layer may be unconsumed"},
    {"a zoo model on the wrong input", "zoo: resnet18", "[16, 16]", false,
     "model.zoo: resnet18 needs an image input (H, W, C), got (16, 16)"},
};

std::string Yaml(const Case& c) {
  return absl::StrCat("model:\n  ", absl::StrReplaceAll(c.model, {{"\n", "\n  "}}),
                      "\ndata:\n  train: {format: synthetic, shape: ", c.shape,
                      ", num_classes: 3, num_examples: 12}\n"
                      "training: {epochs: 1, batch_size: 4, threads: 1, optimizer: {type: sgd, "
                      "lr: 0.1}}\n");
}

TEST(ShapeRulesAgreeTest, TheValidatorAndTheTrainerAgree) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    auto spec = common::LoadJobSpecString(Yaml(c), {}, "agree.yaml");
    ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << Yaml(c);
    const absl::Status validated = common::ValidateJobSpec(*spec);
    TrainerOptions options;
    options.spec_validated = true;
    auto trainer = Trainer::Create(*spec, options);
    EXPECT_EQ(validated.ok(), c.accepted) << validated;
    EXPECT_EQ(trainer.ok(), c.accepted) << trainer.status();
    if (c.accepted || validated.ok() || trainer.ok()) continue;
    EXPECT_EQ(validated.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string v(validated.message()), t(trainer.status().message());
    EXPECT_NE(v.find(c.message), std::string::npos) << v;
    EXPECT_NE(t.find(c.message), std::string::npos) << t;
    // The validator says what the trainer says, and adds the input's shape.
    EXPECT_EQ(v.rfind(t, 0), 0u) << "validator: " << v << "\ntrainer: " << t;
  }
}

}  // namespace
}  // namespace yoke::worker
