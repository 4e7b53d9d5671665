#include "config/config.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "jobspec/job_validate.h"

namespace yoke::common {
namespace {

using testing::HasSubstr;
using testing::Not;

absl::StatusOr<v1::JobSpec> Parse(const std::string& yaml,
                                  const std::vector<std::string>& overrides = {}) {
  return LoadJobSpecString(yaml, overrides, "job.yaml");
}

// Expects INVALID_ARGUMENT whose message contains every one of `parts`.
void ExpectInvalid(const std::string& yaml, const std::vector<std::string>& parts,
                   const std::vector<std::string>& overrides = {}) {
  auto s = Parse(yaml, overrides);
  ASSERT_FALSE(s.ok()) << "accepted:\n" << yaml;
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << s.status();
  for (const std::string& p : parts) {
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(p)) << yaml;
  }
}

TEST(YamlToProtoTest, ReadsEveryKindOfField) {
  auto s = Parse(R"(
name: demo
model:
  layers:
    - dense: {units: 256, no_bias: true}
    - {name: r, relu: {}, inputs: [dense_0]}
data:
  train: {format: synthetic, shape: [28, 28, 1], num_classes: 10, num_examples: 100,
          seed: 18446744073709551615}
  transform: {divisor: 255, mean: [0.5], std: [1]}
training:
  epochs: 3
  batch_size: 64
  max_steps: 9000000000
  optimizer: {type: sgd, lr: 1.5e-2, nesterov: false}
)");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name(), "demo");
  ASSERT_EQ(s->model().layers_size(), 2);
  EXPECT_EQ(s->model().layers(0).dense().units(), 256);
  EXPECT_TRUE(s->model().layers(0).dense().no_bias());
  EXPECT_EQ(s->model().layers(1).name(), "r");
  EXPECT_TRUE(s->model().layers(1).has_relu());
  EXPECT_THAT(s->model().layers(1).inputs(), testing::ElementsAre("dense_0"));
  EXPECT_THAT(s->data().train().shape(), testing::ElementsAre(28, 28, 1));
  EXPECT_EQ(s->data().train().seed(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(s->data().transform().divisor(), 255.0f);  // an int into a float
  EXPECT_EQ(s->data().transform().std(0), 1.0f);
  EXPECT_EQ(s->training().max_steps(), 9000000000LL);
  EXPECT_FLOAT_EQ(s->training().optimizer().lr(), 0.015f);
}

TEST(YamlToProtoTest, WorksForAnyMessageType) {
  v1::OptimizerSpec o;
  ASSERT_TRUE(YamlToProto(YAML::Load("{type: adam, lr: 0.001}"), &o, "training.optimizer").ok());
  EXPECT_EQ(o.type(), "adam");
  absl::Status s = YamlToProto(YAML::Load("{tpye: adam}"), &o, "training.optimizer");
  EXPECT_THAT(std::string(s.message()), HasSubstr("training.optimizer.tpye: unknown field"));
}

TEST(YamlToProtoTest, UnknownFieldSuggestsClosestName) {
  ExpectInvalid("training: {optimzer: {type: sgd}}",
                {"job.yaml:1:12: training.optimzer: unknown field", "did you mean 'optimizer'?",
                 "known: epochs, batch_size, seed"});
}

TEST(YamlToProtoTest, UnknownFieldFarFromAnyNameHasNoSuggestion) {
  auto s = Parse("training: {zzzzzzzz: 1}");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("training.zzzzzzzz: unknown field"));
  EXPECT_THAT(std::string(s.status().message()), Not(HasSubstr("did you mean")));
}

TEST(YamlToProtoTest, UnknownTopLevelKey) {
  ExpectInvalid("modle: {zoo: mlp}", {"modle: unknown field", "did you mean 'model'?"});
}

TEST(YamlToProtoTest, WrongScalarTypes) {
  ExpectInvalid("training: {batch_size: sixty-four}",
                {"training.batch_size: expected an integer", "got 'sixty-four'"});
  ExpectInvalid("training: {batch_size: 6.5}", {"training.batch_size", "got '6.5'"});
  ExpectInvalid("training: {batch_size: \"64\"}", {"training.batch_size", "quoted string \"64\""});
  ExpectInvalid("training: {optimizer: {lr: fast}}",
                {"training.optimizer.lr: expected a number, got 'fast'"});
  ExpectInvalid("training: {optimizer: {lr: 0x10}}", {"training.optimizer.lr"});
  ExpectInvalid("training: {optimizer: {nesterov: yes}}",
                {"training.optimizer.nesterov: expected true or false, got 'yes'"});
  ExpectInvalid("training: {optimizer: {nesterov: 1}}", {"training.optimizer.nesterov"});
  ExpectInvalid("name: [a, b]", {"name: expected a string, got a list"});
  ExpectInvalid("training: {epochs: }", {"training.epochs", "null"});
}

TEST(YamlToProtoTest, IntegerRanges) {
  ExpectInvalid("training: {epochs: 2147483648}",
                {"training.epochs: 2147483648 is out of range for a 32-bit integer"});
  ExpectInvalid("training: {epochs: -2147483649}", {"training.epochs", "out of range"});
  ExpectInvalid("training: {max_steps: 9223372036854775808}",
                {"training.max_steps", "out of range for a 64-bit integer"});
  ExpectInvalid("training: {seed: -1}", {"training.seed: must be >= 0", "got -1"});
  ExpectInvalid("training: {seed: 18446744073709551616}", {"training.seed", "out of range"});
  ExpectInvalid("training: {optimizer: {lr: 1e39}}",
                {"training.optimizer.lr: 1e39 is out of range for a 32-bit float"});

  auto ok = Parse("training: {epochs: -2147483648, seed: 0}");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->training().epochs(), std::numeric_limits<int32_t>::min());
}

TEST(YamlToProtoTest, YamlFloatSpecials) {
  auto s = Parse("training: {optimizer: {lr: .inf, momentum: -.inf, beta1: .nan}}");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(std::isinf(s->training().optimizer().lr()));
  EXPECT_LT(s->training().optimizer().momentum(), 0);
  EXPECT_TRUE(std::isnan(s->training().optimizer().beta1()));
}

TEST(YamlToProtoTest, ListsAndMapsMustMatchTheField) {
  ExpectInvalid("model: {hidden: 256}", {"model.hidden: expected a list, got '256'"});
  ExpectInvalid("model: {hidden: {a: 1}}", {"model.hidden: expected a list, got a map"});
  ExpectInvalid("model: {hidden: [256, x]}", {"model.hidden[1]: expected an integer, got 'x'"});
  ExpectInvalid("model: [zoo, mlp]", {"model: expected a map of ModelSpec fields, got a list"});
  ExpectInvalid("training: 5", {"training: expected a map of TrainingSpec fields, got '5'"});
  ExpectInvalid("- a\n- b", {"document: expected a map", "got a list"});
  ExpectInvalid("model: {layers: {dense: {units: 1}}}", {"model.layers: expected a list"});
}

TEST(YamlToProtoTest, DuplicateKeys) {
  ExpectInvalid("training:\n  epochs: 1\n  epochs: 2\n",
                {"job.yaml:3:3: training.epochs: duplicate key"});
  ExpectInvalid("model: {zoo: mlp}\nmodel: {zoo: cnn}\n", {"model: duplicate key"});
}

TEST(YamlToProtoTest, OneofMapAndScalarForms) {
  auto s = Parse(R"(
model:
  layers:
    - flatten
    - relu:
    - dropout: {rate: 0.5}
    - {name: x, add: {}, inputs: [a, b]}
)");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->model().layers_size(), 4);
  EXPECT_EQ(s->model().layers(0).kind_case(), v1::LayerSpec::kFlatten);
  EXPECT_EQ(s->model().layers(1).kind_case(), v1::LayerSpec::kRelu);
  EXPECT_FLOAT_EQ(s->model().layers(2).dropout().rate(), 0.5f);
  EXPECT_EQ(s->model().layers(3).kind_case(), v1::LayerSpec::kAdd);
}

TEST(YamlToProtoTest, OneofScalarMustNameAMember) {
  ExpectInvalid("model: {layers: [flatten, rleu]}",
                {"model.layers[1]: expected a map or one of dense, conv2d", "got 'rleu'",
                 "did you mean 'relu'?"});
  // Only plain scalars name a member; "relu" in quotes is a string.
  ExpectInvalid("model: {layers: [\"relu\"]}", {"model.layers[0]"});
  // A message without a oneof has no scalar form.
  ExpectInvalid("training: {optimizer: sgd}",
                {"training.optimizer: expected a map of OptimizerSpec fields, got 'sgd'"});
}

TEST(YamlToProtoTest, TwoMembersOfOneOneof) {
  ExpectInvalid("model:\n  layers:\n    - relu\n    - relu\n    - {dense: {units: 4}, relu: {}}\n",
                {"job.yaml:5:", "model.layers[2]: set only one of dense, conv2d, max_pool2d",
                 "(got dense and relu)"});
}

TEST(YamlToProtoTest, NestedPathsInErrors) {
  ExpectInvalid("model:\n  layers:\n    - conv2d: {filters: 8, kernel: three}\n",
                {"job.yaml:3:", "model.layers[0].conv2d.kernel: expected an integer"});
}

TEST(LoadJobSpecTest, SyntaxErrorCarriesPosition) {
  ExpectInvalid("training:\n  epochs: [1, 2\n", {"job.yaml:", "YAML syntax error"});
  auto s = Parse("a: b\n  c: d\n");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("job.yaml:2:"));
}

TEST(LoadJobSpecTest, RejectsSeveralDocuments) {
  ExpectInvalid("name: a\n---\nname: b\n",
                {"job.yaml:2: expected one YAML document, found a second one here"});
}

// yaml-cpp 0.7's YAML::LoadAll never returns on these: its parser reports
// empty documents without consuming input. The fuzzer found the first.
TEST(LoadJobSpecTest, InputThatStallsTheYamlParserIsASyntaxError) {
  ExpectInvalid(",", {"job.yaml:1:1: YAML syntax error", "','"});
  ExpectInvalid("{name: a},", {"job.yaml:1:", "YAML syntax error", "','"});
  ExpectInvalid("name: a\n---\n,", {"job.yaml:", "YAML syntax error"});
}

TEST(LoadJobSpecTest, EmptyDocumentIsAnEmptySpec) {
  auto s = Parse("");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->ByteSizeLong(), 0u);
}

TEST(LoadJobSpecTest, MissingFileIsNotFound) {
  auto s = LoadJobSpecFile("/nonexistent/dir/job.yaml", {});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("/nonexistent/dir/job.yaml"));
}

TEST(LoadJobSpecTest, ReadsAFile) {
  std::string path = testing::TempDir() + "/config_test_job.yaml";
  {
    std::ofstream out(path);
    out << "training:\n  epochs: 7\n  batch_size: nope\n";
  }
  auto bad = LoadJobSpecFile(path, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr(path + ":3:15: training.batch_size: expected an integer, got 'nope'"));
  auto good = LoadJobSpecFile(path, {"training.batch_size=32"});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->training().epochs(), 7);
  EXPECT_EQ(good->training().batch_size(), 32);
  std::remove(path.c_str());
}

TEST(OverrideTest, SetsScalarsListsAndCreatesMaps) {
  const std::string base = R"(
model:
  layers:
    - dense: {units: 256}
    - relu
training: {epochs: 5}
)";
  auto s = Parse(base, {"training.epochs=1", "model.layers[0].dense.units=32",
                        "data.transform.mean=[0.5]", "training.optimizer.type=adam",
                        "model.layers[1]=tanh", "name=with spaces = and equals"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->training().epochs(), 1);
  EXPECT_EQ(s->model().layers(0).dense().units(), 32);
  EXPECT_THAT(s->data().transform().mean(), testing::ElementsAre(0.5f));
  EXPECT_EQ(s->training().optimizer().type(), "adam");
  EXPECT_TRUE(s->model().layers(1).has_tanh());
  EXPECT_EQ(s->name(), "with spaces = and equals");
}

TEST(OverrideTest, LaterOverridesWin) {
  auto s = Parse("training: {epochs: 5}", {"training.epochs=2", "training.epochs=3"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->training().epochs(), 3);
}

TEST(OverrideTest, EmptyValueIsEmptyString) {
  auto s = Parse("training: {loss: mse}", {"training.loss="});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->training().loss(), "");
}

TEST(OverrideTest, ReplacesAWholeSubtree) {
  auto s = Parse("model: {zoo: mlp, hidden: [1, 2, 3]}", {"model.hidden=[7]"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(s->model().hidden(), testing::ElementsAre(7));
}

TEST(OverrideTest, BadOverrides) {
  const std::string base = "model: {layers: [relu, relu]}\ntraining: {epochs: 5}\n";
  ExpectInvalid(base, {"--set training.epochs: expected path=value"}, {"training.epochs"});
  ExpectInvalid(base, {"index 2 is past the end of 'model.layers' (2 items)"},
                {"model.layers[2].dense.units=3"});
  ExpectInvalid(base, {"malformed path"}, {"model..layers=1"});
  ExpectInvalid(base, {"malformed path"}, {"model.layers[x]=1"});
  ExpectInvalid(base, {"malformed path"}, {"=1"});
  ExpectInvalid(base, {"malformed path"}, {"[0]=1"});
  ExpectInvalid(base, {"'training.epochs' is a scalar"}, {"training.epochs.x=1"});
  ExpectInvalid(base, {"'training' is a map, not a list"}, {"training[0]=1"});
  ExpectInvalid(base, {"the value is not valid YAML"}, {"training.epochs=[1"});
  // A bad value is blamed on the override, not on a file position.
  ExpectInvalid(base, {"--set training.epochs=many: training.epochs: expected an integer"},
                {"training.epochs=many"});
  ExpectInvalid(base, {"--set training.optimzer.lr=1: training.optimzer: unknown field"},
                {"training.optimzer.lr=1"});
}

TEST(OverrideTest, WorksOnAnEmptyDocument) {
  auto s = Parse("", {"training.optimizer.lr=0.5"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FLOAT_EQ(s->training().optimizer().lr(), 0.5f);
}

// ---- `--set path=null`: clears the field, as if the document never set it.

TEST(OverrideNullTest, ClearsAScalar) {
  auto s = Parse("training: {epochs: 5, loss: mse}\ndata: {train: {label_column: 0}}",
                 {"training.loss=null", "training.epochs=~", "data.train.label_column=null"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->training().loss(), "");
  EXPECT_EQ(s->training().epochs(), 0);
  EXPECT_TRUE(s->has_data());
  // A proto3 `optional` loses its presence too (0 would be "the first column").
  EXPECT_FALSE(s->data().train().has_label_column());
}

TEST(OverrideNullTest, ClearsAMessage) {
  const std::string base = "training: {epochs: 5, optimizer: {type: sgd, lr: 0.1}}";
  auto s = Parse(base, {"training.optimizer=null"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->training().has_optimizer());
  EXPECT_EQ(s->training().epochs(), 5);
  // Overrides apply in order: set after the clear, only the new fields are there.
  s = Parse(base, {"training.optimizer=null", "training.optimizer.lr=0.5"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->training().optimizer().type(), "");
  EXPECT_FLOAT_EQ(s->training().optimizer().lr(), 0.5f);
}

TEST(OverrideNullTest, ClearsARepeatedField) {
  auto s = Parse("model: {zoo: mlp, hidden: [1, 2, 3]}\ndata: {train: {files: [a, b]}}",
                 {"model.hidden=null", "data.train.files=NULL"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model().hidden_size(), 0);
  EXPECT_EQ(s->data().train().files_size(), 0);
  EXPECT_EQ(s->model().zoo(), "mlp");
}

TEST(OverrideNullTest, ClearingInsideAnAbsentMessageDoesNotCreateIt) {
  auto s =
      Parse("data: {train: {format: csv}}", {"data.test.cache_file=null", "checkpoint.dir=null"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->data().has_test());
  EXPECT_FALSE(s->has_checkpoint());
  // ... until an override sets a value in it.
  s = Parse("data: {train: {format: csv}}", {"data.test.cache_file=null", "data.test.format=idx"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->data().test().format(), "idx");
}

TEST(OverrideNullTest, ClearingOneLayerKindAllowsAnother) {
  auto s = Parse("model: {layers: [{dense: {units: 3}}]}",
                 {"model.layers[0].relu={}", "model.layers[0].dense=null"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->model().layers(0).has_relu());
  EXPECT_FALSE(s->model().layers(0).has_dense());
}

TEST(OverrideNullTest, UnknownKeysAreNamedAsForAnyValue) {
  const std::string base = "training: {epochs: 5}\n";
  ExpectInvalid(base,
                {"--set training.optimzer=null: training.optimzer: unknown field (did you mean "
                 "'optimizer'? known: "},
                {"training.optimzer=null"});
  ExpectInvalid(base, {"--set trainnig=null: trainnig: unknown field (did you mean 'training'?"},
                {"trainnig=null"});
  // Inside a message the document does not have, and one level deeper.
  ExpectInvalid(base, {"--set data.test.imagez=null: data.test.imagez: unknown field"},
                {"data.test.imagez=null"});
  ExpectInvalid(base, {"--set nonsense.deeper=null: nonsense: unknown field"},
                {"nonsense.deeper=null"});
}

TEST(OverrideNullTest, ListItemsAndOtherValuesKeepTheirErrors) {
  const std::string base = "model: {zoo: mlp, hidden: [1, 2]}\ntraining: {epochs: 5}\n";
  // A null list item is a value like any other, with the same type error.
  ExpectInvalid(base,
                {"--set model.hidden[0]=null: model.hidden[0]: expected an integer, got "
                 "nothing (null)"},
                {"model.hidden[0]=null"});
  // A quoted 'null' is a string; path errors are unchanged.
  ExpectInvalid(base,
                {"--set training.epochs='null': training.epochs: expected an integer, got "
                 "the quoted string \"null\""},
                {"training.epochs='null'"});
  ExpectInvalid(base, {"'training.epochs' is a scalar"}, {"training.epochs.x=null"});
  ExpectInvalid(base, {"index 2 is past the end of 'model.hidden'"}, {"model.hidden[2]=null"});
  // Only --set clears: a file that spells the tag gets an ordinary value.
  auto s = Parse("training: {loss: !yoke-clear mse}");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->training().loss(), "mse");
  // A null in the document itself is still an error for a scalar.
  ExpectInvalid("training: {epochs: null}", {"training.epochs: expected an integer, got nothing"});
}

// The reason null exists: switching a dataset's format with --set alone, when
// the old format's fields would otherwise stay behind and fail validation.
TEST(OverrideNullTest, SwitchingIdxToImageFolderValidates) {
  const std::string job = R"(
model: {zoo: mlp}
data:
  train: {format: idx, images: /data/train-images.gz, labels: /data/train-labels.gz}
training: {epochs: 1, batch_size: 8, optimizer: {type: sgd, lr: 0.1}}
)";
  const std::vector<std::string> to_folder = {"data.train.format=image_folder",
                                              "data.train.root=/data/photos",
                                              "data.train.image_size=[28, 28]"};
  auto kept = Parse(job, to_folder);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_THAT(std::string(ValidateJobSpec(*kept).message()),
              HasSubstr("data.train.images: not used by format 'image_folder' (only idx)"));
  std::vector<std::string> cleared = to_folder;
  cleared.push_back("data.train.images=null");
  cleared.push_back("data.train.labels=null");
  auto switched = Parse(job, cleared);
  ASSERT_TRUE(switched.ok()) << switched.status();
  EXPECT_EQ(switched->data().train().format(), "image_folder");
  EXPECT_EQ(switched->data().train().images(), "");
  EXPECT_TRUE(ValidateJobSpec(*switched).ok()) << ValidateJobSpec(*switched);
}

TEST(ApplyOverrideTest, EditsTheTreeInPlace) {
  YAML::Node root = YAML::Load("a: {b: 1}\nc: [x, y]");
  ASSERT_TRUE(ApplyOverride("a.b=2", &root).ok());
  ASSERT_TRUE(ApplyOverride("c[1]=z", &root).ok());
  ASSERT_TRUE(ApplyOverride("d.e.f=3", &root).ok());
  EXPECT_EQ(root["a"]["b"].as<int>(), 2);
  EXPECT_EQ(root["c"][0].as<std::string>(), "x");
  EXPECT_EQ(root["c"][1].as<std::string>(), "z");
  EXPECT_EQ(root["d"]["e"]["f"].as<int>(), 3);
  EXPECT_EQ(root.size(), 3u);
}

bool SameSpec(const v1::JobSpec& a, const v1::JobSpec& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

TEST(ProtoToYamlTest, RoundTripsEveryFieldKind) {
  v1::JobSpec spec;
  spec.set_name("null");  // a string that reads as null unless quoted
  spec.mutable_model()->add_layers()->mutable_flatten();
  auto* conv = spec.mutable_model()->add_layers();
  conv->set_name("c: 1 # not a comment");
  conv->add_inputs("input");
  conv->mutable_conv2d()->set_filters(8);
  conv->mutable_conv2d()->set_kernel(3);
  conv->mutable_conv2d()->set_padding("valid");
  conv->mutable_conv2d()->set_no_bias(true);
  spec.mutable_model()->add_hidden(-5);
  spec.mutable_data()->mutable_train()->set_seed(std::numeric_limits<uint64_t>::max());
  spec.mutable_data()->mutable_train()->set_num_examples(-(int64_t{1} << 40));
  spec.mutable_data()->mutable_train()->add_files("");
  spec.mutable_data()->mutable_train()->add_files("/a b/c'd\"e");
  spec.mutable_data()->mutable_transform()->add_mean(0.1f);
  spec.mutable_data()->mutable_transform()->add_mean(1.0f / 3.0f);
  spec.mutable_data()->mutable_transform()->add_std(1e-30f);
  spec.mutable_training()->mutable_optimizer()->set_lr(std::numeric_limits<float>::infinity());
  spec.mutable_training()->mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_training()->set_loss("true");

  const std::string yaml = JobSpecToYaml(spec);
  auto back = LoadJobSpecString(yaml, {}, "emitted");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_TRUE(SameSpec(spec, *back)) << yaml << "\nvs\n" << back->DebugString();
}

TEST(ProtoToYamlTest, ShortFloatsAndEmptyKinds) {
  v1::JobSpec spec;
  spec.mutable_training()->mutable_optimizer()->set_lr(0.05f);
  spec.mutable_model()->add_layers()->mutable_relu();
  const std::string yaml = JobSpecToYaml(spec);
  EXPECT_THAT(yaml, HasSubstr("lr: 0.05\n"));  // not 0.0500000007
  EXPECT_THAT(yaml, HasSubstr("relu: {}"));
  EXPECT_EQ(JobSpecToYaml(v1::JobSpec()), "{}\n");
}

}  // namespace
}  // namespace yoke::common
