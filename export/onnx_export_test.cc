// ONNX export of checkpoints: a data-parallel job's checkpoint exports to the
// same bytes as a single-rank job's with the same parameters, and a change of
// one parameter or statistic changes the file. onnxruntime's agreement with
// Yoke is tests/onnx_export_test.py's.
#include "export/onnx_export.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "collective/store.h"
#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "engine/checkpoint.h"
#include "export/onnx_metadata.h"
#include "gtest/gtest.h"
#include "trainer/trainer.h"

namespace yoke::exporter {
namespace {

constexpr char kJob[] = R"(
name: dp
model:
  layers:
    - {conv2d: {filters: 4, kernel: 3}}
    - {batch_norm: {momentum: 0.5}}
    - {relu: {}}
    - {flatten: {}}
    - {dropout: {rate: 0.2}}
    - {dense: {units: 3}}
data:
  train: {format: synthetic, shape: [6, 6, 2], num_classes: 3, num_examples: 64, seed: 1}
  transform: {divisor: 2}
training:
  epochs: 1
  batch_size: 16
  seed: 7
  optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
distribution: {devices_per_worker: 2}
logging: {tensorboard_dir: "off"}
)";

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string Export(const std::string& ckpt, const std::string& out) {
  auto m = LoadModel(ckpt);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return "";
  absl::Status s = WriteOnnx(*m, OnnxOptions(), out);
  EXPECT_TRUE(s.ok()) << s;
  return ReadAll(out);
}

// A checkpoint of two ranks in one process, as `yoke train --world-size 2
// --replicas 2` writes it.
std::string TrainDataParallel(const common::TempDir& dir) {
  auto spec = common::LoadJobSpecString(kJob, {"checkpoint.dir=" + dir.File("dp")});
  EXPECT_TRUE(spec.ok()) << spec.status();
  collective::InMemoryStore store;
  worker::TrainerOptions o;
  o.world_size = 2;
  o.num_replicas = 2;
  o.store = &store;
  auto t = worker::Trainer::Create(*spec, o);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  auto r = (*t)->Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->checkpoint() : "";
}

TEST(OnnxExportTest, DataParallelCheckpointExportsAsASingleRankOne) {
  common::TempDir dir("onnx_export");
  const std::string dp = TrainDataParallel(dir);
  ASSERT_FALSE(dp.empty());
  auto ck = engine::ReadCheckpoint(dp);
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_EQ(ck->header.world_size(), 2);

  // The same parameters as a single-rank job would write them: one replica,
  // its own timings, no distribution section, no optimizer state.
  v1::CheckpointHeader one = ck->header;
  one.set_world_size(1);
  one.mutable_spec()->clear_distribution();
  one.set_wall_seconds(ck->header.wall_seconds() * 3 + 1);
  one.set_samples_seen(ck->header.samples_seen() + 5);
  one.clear_tensors();
  engine::NamedTensors kept;
  for (const auto& [name, t] : ck->tensors) {
    if (name == "params" || name == "state") kept.emplace_back(name, t);
  }
  const std::string single = dir.File("single.yoke");
  ASSERT_TRUE(engine::WriteCheckpoint(single, one, kept).ok());

  const std::string a = Export(dp, dir.File("dp.onnx"));
  const std::string b = Export(single, dir.File("single.onnx"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the data-parallel checkpoint exports to other bytes";
  EXPECT_TRUE(a == Export(dp, dir.File("again.onnx"))) << "export is not deterministic";

  // One parameter, then one batch-norm statistic, moved by one ulp: the file
  // must differ, or the comparison above proves nothing.
  for (const char* which : {"params", "state"}) {
    engine::NamedTensors changed;
    for (const auto& [name, t] : kept) {
      engine::Tensor c = engine::Tensor::Empty(t.shape(), t.dtype());
      c.CopyFrom(t);
      if (name == which) c.data<float>()[0] = std::nextafter(c.data<float>()[0], 1e9f);
      changed.emplace_back(name, c);
    }
    const std::string other = dir.File(std::string("changed_") + which + ".yoke");
    ASSERT_TRUE(engine::WriteCheckpoint(other, one, changed).ok());
    EXPECT_TRUE(a != Export(other, dir.File("changed.onnx"))) << which << " changed, the file not";
  }
}

TEST(OnnxExportTest, MetadataAndGraphShape) {
  common::TempDir dir("onnx_export");
  const std::string dp = TrainDataParallel(dir);
  ASSERT_FALSE(dp.empty());
  auto m = LoadModel(dir.File("dp"));  // a directory: its newest checkpoint
  ASSERT_TRUE(m.ok()) << m.status();
  OnnxOptions o;
  o.batch = 4;
  o.softmax = true;
  auto model = ExportOnnx(*m, o);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->opset_import(0).version(), kOnnxOpset);
  EXPECT_EQ(model->graph().input(0).type().tensor_type().shape().dim(0).dim_value(), 4);
  EXPECT_EQ(model->graph().output(0).name(), "probabilities");
  std::map<std::string, std::string> meta;
  for (const auto& e : model->metadata_props()) meta[e.key()] = e.value();
  EXPECT_EQ(meta["yoke.input_layout"], "NHWC");
  EXPECT_EQ(meta["yoke.input_shape"], "[6, 6, 2]");
  EXPECT_EQ(meta["yoke.transform.divisor"], "2");
  EXPECT_EQ(meta["yoke.output"], "probabilities");
  EXPECT_EQ(meta["yoke.num_classes"], "3");
  // Dropout is the identity: no node of the graph is a Dropout.
  for (const auto& n : model->graph().node()) EXPECT_NE(n.op_type(), "Dropout");
}

TEST(OnnxExportTest, JsonStringEscapes) {
  EXPECT_EQ(JsonString("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
}

}  // namespace
}  // namespace yoke::exporter
