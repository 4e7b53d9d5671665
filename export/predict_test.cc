// Prediction from a checkpoint: the trainer's reported test accuracy, a
// checkpoint written before the header had the input shape, and the errors.
#include "export/predict.h"

#include <string>

#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "engine/checkpoint.h"
#include "export/onnx_export.h"
#include "gtest/gtest.h"
#include "trainer/trainer.h"

namespace yoke::exporter {
namespace {

constexpr char kJob[] = R"(
name: predict
model: {zoo: mlp, hidden: [16], dropout: 0.3}
data:
  train: {format: synthetic, shape: [4, 4, 1], num_classes: 4, num_examples: 256, seed: 1}
  test: {format: synthetic, shape: [4, 4, 1], num_classes: 4, num_examples: 300, seed: 2}
  transform: {divisor: 3}
training:
  epochs: 2
  batch_size: 32
  eval_batch_size: 64
  seed: 5
  optimizer: {type: adam, lr: 0.01}
logging: {tensorboard_dir: "off"}
)";

struct TrainedRun {
  std::string checkpoint;
  double test_accuracy = 0;
};

TrainedRun Train(const common::TempDir& dir) {
  auto spec = common::LoadJobSpecString(kJob, {"checkpoint.dir=" + dir.File("ckpt")});
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto t = worker::Trainer::Create(*spec, worker::TrainerOptions());
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  auto r = (*t)->Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? TrainedRun{r->checkpoint(), r->test_accuracy()} : TrainedRun{};
}

TEST(PredictTest, TestSplitGivesTheReportedAccuracy) {
  common::TempDir dir("predict");
  const TrainedRun run = Train(dir);
  auto m = LoadModel(run.checkpoint);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE(m->last_epoch.has_value());
  EXPECT_EQ(m->last_epoch->test_accuracy(), run.test_accuracy);
  auto r = Predict(*m, PredictOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->n, 300);
  EXPECT_EQ(r->labelled, 300);
  EXPECT_EQ(static_cast<double>(r->correct) / r->labelled, run.test_accuracy);
  EXPECT_EQ(r->logits.size(), 300u * 4);
  // --limit stops early; the training split reads too.
  PredictOptions o;
  o.limit = 70;
  o.split = "train";
  auto some = Predict(*m, o);
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(some->n, 70);
}

TEST(PredictTest, CheckpointWithoutInputShapeOpensTheTrainingSet) {
  common::TempDir dir("predict");
  const TrainedRun run = Train(dir);
  auto ck = engine::ReadCheckpoint(run.checkpoint);
  ASSERT_TRUE(ck.ok()) << ck.status();
  v1::CheckpointHeader old = ck->header;
  old.clear_input_shape();
  old.clear_num_classes();
  old.clear_tensors();
  const std::string path = dir.File("old.yoke");
  ASSERT_TRUE(engine::WriteCheckpoint(path, old, ck->tensors).ok());
  auto m = LoadModel(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->input_shape, (engine::Shape{4, 4, 1}));
  EXPECT_EQ(m->num_classes, 4);
  auto now = LoadModel(run.checkpoint);
  ASSERT_TRUE(now.ok()) << now.status();
  auto a = ExportOnnx(*m, OnnxOptions());
  auto b = ExportOnnx(*now, OnnxOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->SerializeAsString(), b->SerializeAsString());
}

TEST(PredictTest, Errors) {
  common::TempDir dir("predict");
  const TrainedRun run = Train(dir);
  auto m = LoadModel(run.checkpoint);
  ASSERT_TRUE(m.ok()) << m.status();
  PredictOptions o;
  o.split = "validation";
  EXPECT_EQ(Predict(*m, o).status().message(),
            "--split: unknown value 'validation' (known: test, train)");
  m->spec.mutable_data()->clear_test();
  auto none = Predict(*m, PredictOptions());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("data.test is not set"), std::string::npos)
      << none.status();
  EXPECT_EQ(LoadModel(dir.File("missing.yoke")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace yoke::exporter
