// Pipeline jobs through the Trainer, over real Gloo on loopback: a model
// split into stages trains exactly as one rank accumulating the same
// micro-batches (bit for bit), two pipelines exactly as two data-parallel
// ranks accumulating them, and the pipelined evaluation reports what one
// rank's does.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "collective/store.h"
#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "data/idx_reader.h"
#include "data/image_folder.h"
#include "data/image_folder_writer.h"
#include "engine/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/testing/trainer_runs.h"
#include "trainer/trainer.h"

namespace yoke::worker {
namespace {

using testing::MakeWorkers;
using testing::RunWorkers;
using testing::Worker;

// The Fashion-MNIST MLP with dropout on the first 2,000 training images and
// 500 test images; cut after the first hidden layer's dropout.
v1::JobSpec MlpJob() {
  auto spec = common::LoadJobSpecString(R"(
model:
  layers:
    - flatten
    - {name: fc1, dense: {units: 128}}
    - relu
    - {name: drop, dropout: {rate: 0.25}}
    - {name: fc2, dense: {units: 64}}
    - relu
    - {name: out, dense: {units: 10}}
data:
  train: {format: idx, num_examples: 2000,
          images: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz,
          labels: /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz}
  test: {format: idx, num_examples: 500,
         images: /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz,
         labels: /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz}
  transform: {divisor: 255}
training:
  epochs: 1
  batch_size: 64
  max_steps: 12
  seed: 3
  loss: softmax_cross_entropy
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
  threads: 1
)",
                                        {}, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

// On `workers` workers of `devices` ranks each.
v1::JobSpec Pipelined(v1::JobSpec spec, int workers, int devices, int stages, int micro,
                      const std::string& schedule, std::vector<std::string> boundaries = {}) {
  spec.mutable_distribution()->set_workers(workers);
  spec.mutable_distribution()->set_devices_per_worker(devices);
  v1::PipelineSpec* p = spec.mutable_distribution()->mutable_pipeline();
  p->set_stages(stages);
  p->set_micro_batches(micro);
  p->set_schedule(schedule);
  for (auto& b : boundaries) p->add_boundaries(b);
  return spec;
}

// Every parameter and state entry by name, over local replicas [first,
// first + count) of `t` (a pipeline's stages hold disjoint names).
using Named = std::map<std::string, std::vector<float>>;
void Collect(Trainer& t, int first, int count, Named* out) {
  for (int i = first; i < first + count; ++i) {
    const engine::ParamSet& ps = t.model(i).params();
    for (size_t k = 0; k < ps.entries().size(); ++k) {
      const engine::Tensor v = ps.value(static_cast<int>(k));
      (*out)[ps.entries()[k].name].assign(v.data<float>(), v.data<float>() + v.numel());
    }
    for (size_t k = 0; k < ps.state_entries().size(); ++k) {
      const engine::Tensor v = ps.state(static_cast<int>(k));
      (*out)["state " + ps.state_entries()[k].name].assign(v.data<float>(),
                                                           v.data<float>() + v.numel());
    }
  }
}

struct Alone {
  Named values;
  v1::TrainResult result;
};

// One trainer of `ranks` local replicas (ranks 0..ranks-1) over an
// in-memory store.
Alone RunLocal(const v1::JobSpec& spec, int ranks, int collect_first, int collect_count) {
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(spec, 1, ranks, &store);
  RunWorkers(w);
  EXPECT_TRUE(w[0].status.ok()) << w[0].status;
  Alone out;
  if (!w[0].status.ok()) return out;
  Collect(*w[0].trainer, collect_first, collect_count, &out.values);
  out.result = w[0].result;
  return out;
}

Alone RunAlone(v1::JobSpec spec, int accumulation, const std::string& resume = "") {
  spec.mutable_training()->set_accumulation_steps(accumulation);
  TrainerOptions o;
  o.resume = resume;
  auto t = Trainer::Create(spec, o);
  EXPECT_TRUE(t.ok()) << t.status();
  Alone out;
  if (!t.ok()) return out;
  auto r = (*t)->Run();
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) out.result = *r;
  Collect(**t, 0, 1, &out.values);
  return out;
}

// Pipeline 0's stages, one trainer each, over an in-memory store; their
// parameters and state by name.
Named RunStages(const v1::JobSpec& spec, int stages, const std::string& resume) {
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(spec, stages, 1, &store);
  for (Worker& x : w) x.options.resume = resume;
  RunWorkers(w);
  Named out;
  for (Worker& x : w) {
    EXPECT_TRUE(x.status.ok()) << x.status;
    if (!x.status.ok()) return {};
    Collect(*x.trainer, 0, 1, &out);
  }
  return out;
}

// Every tensor of two checkpoint files, bit for bit, and their positions.
void ExpectSameTensors(const std::string& a, const std::string& b) {
  auto x = engine::ReadCheckpoint(a), y = engine::ReadCheckpoint(b);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(x->tensors.size(), y->tensors.size());
  for (size_t i = 0; i < x->tensors.size(); ++i) {
    const auto& [name, t] = x->tensors[i];
    EXPECT_EQ(name, y->tensors[i].first);
    const engine::Tensor& u = y->tensors[i].second;
    ASSERT_EQ(t.bytes(), u.bytes()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), u.raw(), t.bytes()), 0) << name << " differs: " << a;
  }
  EXPECT_EQ(x->header.step(), y->header.step());
  EXPECT_EQ(x->header.step_in_epoch(), y->header.step_in_epoch());
  EXPECT_EQ(x->header.optimizer_step(), y->header.optimizer_step());
  EXPECT_EQ(x->header.num_classes(), y->header.num_classes());
  EXPECT_EQ(std::vector<int64_t>(x->header.input_shape().begin(), x->header.input_shape().end()),
            std::vector<int64_t>(y->header.input_shape().begin(), y->header.input_shape().end()));
}

TEST(PipelineTrainTest, TwoStagesEqualOneRankAccumulatingTheMicroBatches) {
  const v1::JobSpec spec = MlpJob();
  const Alone one = RunAlone(spec, 4);
  ASSERT_FALSE(one.values.empty());
  for (const std::string schedule : {"1f1b", "gpipe"}) {
    for (const bool shm : {false, true}) {
      SCOPED_TRACE(absl::StrCat(schedule, shm ? ", shared memory" : ", gloo"));
      // Two trainers of one rank each: stage 0 and stage 1. Without hosts
      // their messages go over Gloo; on one host (as the workers of `yoke up`
      // say), through shared-memory rings.
      collective::InMemoryStore store;
      std::vector<Worker> w = MakeWorkers(Pipelined(spec, 2, 1, 2, 4, schedule), 2, 1, &store);
      if (shm) {
        for (Worker& x : w) x.options.rank_hosts = {"w-1@127.0.0.1", "w-2@127.0.0.1"};
      }
      RunWorkers(w);
      for (auto& x : w) ASSERT_TRUE(x.status.ok()) << x.status;
      Named piped;
      Collect(*w[0].trainer, 0, 1, &piped);
      Collect(*w[1].trainer, 0, 1, &piped);
      EXPECT_EQ(piped, one.values) << schedule;
      EXPECT_EQ(w[0].trainer->pipeline_through_shm(), shm);
      EXPECT_EQ(w[0].result.steps(), 12);
      // Each rank builds one stage; the result counts the whole model.
      EXPECT_EQ(w[0].result.num_parameters(), one.result.num_parameters());
      EXPECT_GT(one.result.num_parameters(), w[0].trainer->model().params().num_parameters());
      // The job's loss and the evaluation reach global rank 0 (stage 0, which
      // computes neither) exactly as one rank computes them.
      EXPECT_EQ(w[0].result.test_accuracy(), one.result.test_accuracy()) << schedule;
      EXPECT_GT(one.result.test_accuracy(), 0.3);
      EXPECT_NEAR(w[0].result.train_loss(), one.result.train_loss(),
                  1e-6 * std::abs(one.result.train_loss()));
    }
  }
  // Without the accumulation the runs differ: the comparison can fail.
  EXPECT_NE(RunAlone(spec, 1).values, one.values);
}

// The first n examples of a Fashion-MNIST split written out as a PNG tree.
std::string PngTree(const std::string& root, const char* prefix, int64_t n) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  auto idx = data::ReadIdx(absl::StrCat(dir, prefix, "-images-idx3-ubyte.gz"),
                           absl::StrCat(dir, prefix, "-labels-idx1-ubyte.gz"));
  EXPECT_TRUE(idx.ok()) << idx.status();
  if (!idx.ok()) return "";
  const std::string tree = absl::StrCat(root, "/", prefix);
  EXPECT_TRUE(data::WriteImageFolder(*data::TakeFirst(std::move(*idx), n), tree, {}).ok());
  return tree;
}

// A later stage reads only its batches' labels: a pipeline over an image
// folder decodes each image once, in stage 0, and still equals one rank.
TEST(PipelineTrainTest, LaterStagesOfAnImageFolderJobDecodeNoImage) {
  common::TempDir tmp("yoke_pipe_folder");
  v1::JobSpec spec = MlpJob();
  for (auto [set, prefix, n] : {std::tuple{spec.mutable_data()->mutable_train(), "train", 640},
                                std::tuple{spec.mutable_data()->mutable_test(), "t10k", 200}}) {
    const std::string tree = PngTree(tmp.path(), prefix, n);
    ASSERT_FALSE(tree.empty());
    v1::DatasetSpec folder;
    folder.set_format("image_folder");
    folder.set_root(tree);
    folder.add_image_size(28);
    folder.add_image_size(28);
    folder.set_channels(1);
    *set = folder;
  }
  const Alone one = RunAlone(spec, 4);
  ASSERT_FALSE(one.values.empty());
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(Pipelined(spec, 2, 1, 2, 4, "1f1b"), 2, 1, &store);
  RunWorkers(w);
  for (auto& x : w) ASSERT_TRUE(x.status.ok()) << x.status;
  Named piped;
  Collect(*w[0].trainer, 0, 1, &piped);
  Collect(*w[1].trainer, 0, 1, &piped);
  EXPECT_EQ(piped, one.values);
  EXPECT_EQ(w[0].result.test_accuracy(), one.result.test_accuracy());
  const auto* first = dynamic_cast<const data::ImageFolderDataset*>(&w[0].trainer->train_set());
  const auto* last = dynamic_cast<const data::ImageFolderDataset*>(&w[1].trainer->train_set());
  ASSERT_NE(first, nullptr);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(first->decoded(), 640);  // 10 steps of 64: one epoch
  EXPECT_EQ(last->decoded(), 0);
}

TEST(PipelineTrainTest, TwoPipelinesEqualTwoRanksAccumulating) {
  common::TempDir tmp("yoke_pipe_ckpt");
  v1::JobSpec spec = MlpJob();
  spec.mutable_training()->set_batch_size(128);
  // Two data-parallel ranks, each accumulating 4 micro-batches of its 64.
  v1::JobSpec dp = spec;
  dp.mutable_training()->set_accumulation_steps(4);
  dp.mutable_checkpoint()->set_dir(tmp.path() + "/dp");
  const Alone two = RunLocal(dp, 2, 0, 1);
  ASSERT_FALSE(two.values.empty());
  // Ranks 0-1 are pipeline 0 (stages 0, 1), ranks 2-3 pipeline 1; both
  // write the run's stop checkpoint (step 12 of 16 in the epoch) together.
  spec.mutable_checkpoint()->set_dir(tmp.path() + "/piped");
  const v1::JobSpec piped_spec = Pipelined(spec, 2, 2, 2, 4, "1f1b", {"fc2"});
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(piped_spec, 2, 2, &store);
  // Each pipeline's stages share a worker: their messages go through
  // shared memory, the stages' gradients across the workers.
  for (Worker& x : w) {
    x.options.rank_hosts = {"w-1@127.0.0.1", "w-1@127.0.0.1", "w-2@127.0.0.2", "w-2@127.0.0.2"};
  }
  RunWorkers(w);
  for (auto& x : w) ASSERT_TRUE(x.status.ok()) << x.status;
  EXPECT_TRUE(w[0].trainer->pipeline_through_shm());
  Named p0, p1;
  Collect(*w[0].trainer, 0, 2, &p0);
  Collect(*w[1].trainer, 0, 2, &p1);
  EXPECT_EQ(p0, p1) << "both pipelines apply the same reduced gradients";
  EXPECT_EQ(p0, two.values);
  ExpectSameTensors(engine::CheckpointPath(tmp.path() + "/piped", 12),
                    engine::CheckpointPath(tmp.path() + "/dp", 12));
}

TEST(PipelineTrainTest, ABoundaryInsideAResidualBlockIsRefusedAtCreate) {
  v1::JobSpec spec = MlpJob();
  *spec.mutable_data()->mutable_train() = [] {
    v1::DatasetSpec d;
    d.set_format("synthetic");
    d.add_shape(8);
    d.add_shape(8);
    d.add_shape(3);
    d.set_num_classes(10);
    d.set_num_examples(64);
    return d;
  }();
  spec.mutable_data()->clear_test();
  spec.mutable_data()->clear_transform();
  spec.mutable_model()->Clear();
  spec.mutable_model()->set_zoo("resnet20");
  spec.mutable_model()->set_width(8);
  TrainerOptions o;
  o.world_size = 2;
  collective::InMemoryStore store;
  o.store = &store;
  auto t = Trainer::Create(Pipelined(spec, 2, 1, 2, 2, "1f1b", {"layer1.0.bn1"}), o);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(),
              ::testing::HasSubstr("distribution.pipeline.boundaries[0]: the model cannot be cut "
                                   "before 'layer1.0.bn1'"));
}

// A pipeline's checkpoint holds the whole model: the files two stages write
// (at the step cadence and where the run stops) are the ones one rank
// accumulating the same micro-batches writes, tensor for tensor, and the
// stopped run resumes onto another split, onto 3 stages and onto no
// pipeline, each ending exactly where an uninterrupted run does.
TEST(PipelineTrainTest, CheckpointsHoldTheWholeModelAndResumeOntoAnySplit) {
  common::TempDir tmp("yoke_pipe_ckpt");
  const v1::JobSpec spec = MlpJob();  // 12 steps of 64, SGD with momentum
  const Alone full = RunAlone(spec, 4);
  ASSERT_FALSE(full.values.empty());

  v1::JobSpec half = spec;
  half.mutable_training()->set_max_steps(6);
  half.mutable_checkpoint()->set_every_steps(4);
  half.mutable_checkpoint()->set_dir(tmp.path() + "/one");
  RunAlone(half, 4);
  half.mutable_checkpoint()->set_dir(tmp.path() + "/two");
  ASSERT_FALSE(RunStages(Pipelined(half, 2, 1, 2, 4, "1f1b", {"fc2"}), 2, "").empty());
  for (int step : {4, 6}) {
    SCOPED_TRACE(step);
    ExpectSameTensors(engine::CheckpointPath(tmp.path() + "/two", step),
                      engine::CheckpointPath(tmp.path() + "/one", step));
  }

  const std::string at6 = engine::CheckpointPath(tmp.path() + "/two", 6);
  EXPECT_EQ(RunStages(Pipelined(spec, 2, 1, 2, 4, "gpipe", {"out"}), 2, at6), full.values)
      << "another split";
  EXPECT_EQ(RunStages(Pipelined(spec, 3, 1, 3, 4, "1f1b", {"drop", "out"}), 3, at6), full.values)
      << "3 stages";
  EXPECT_EQ(RunAlone(spec, 4, at6).values, full.values) << "no pipeline";
  // Six steps alone end elsewhere: the comparisons above can fail.
  v1::JobSpec six = spec;
  six.mutable_training()->set_max_steps(6);
  EXPECT_NE(RunStages(Pipelined(six, 2, 1, 2, 4, "1f1b", {"fc2"}), 2, ""), full.values)
      << "six steps equal twelve";
}

// The epoch-end and best-epoch checkpoints (checkpoint.keep_best, decided by
// rank 0 and written by every stage) equal one rank's, tensor for tensor.
TEST(PipelineTrainTest, EpochAndBestCheckpointsEqualOneRanks) {
  common::TempDir tmp("yoke_pipe_ckpt");
  v1::JobSpec spec = MlpJob();
  spec.mutable_data()->mutable_train()->set_num_examples(256);  // 4 steps an epoch
  spec.mutable_training()->set_epochs(2);
  spec.mutable_training()->set_max_steps(0);
  spec.mutable_training()->mutable_early_stopping()->set_monitor("test_loss");
  spec.mutable_training()->mutable_early_stopping()->set_patience(3);
  spec.mutable_checkpoint()->set_keep_best(true);
  spec.mutable_checkpoint()->set_dir(tmp.path() + "/one");
  const Alone one = RunAlone(spec, 4);
  ASSERT_EQ(one.result.history_size(), 2);
  EXPECT_GT(one.result.best_epoch(), 0);
  spec.mutable_checkpoint()->set_dir(tmp.path() + "/two");
  ASSERT_FALSE(RunStages(Pipelined(spec, 2, 1, 2, 4, "1f1b", {"fc2"}), 2, "").empty());
  for (int step : {4, 8}) {
    SCOPED_TRACE(step);
    ExpectSameTensors(engine::CheckpointPath(tmp.path() + "/two", step),
                      engine::CheckpointPath(tmp.path() + "/one", step));
  }
  ExpectSameTensors(tmp.path() + "/two/best.ckpt", tmp.path() + "/one/best.ckpt");
}

// Largest |a - b| over every parameter, relative to the largest |b|.
double RelDiff(const Named& a, const Named& b) {
  double diff = 0, scale = 0;
  for (const auto& [name, w] : b) {
    auto it = a.find(name);
    if (it == a.end() || it->second.size() != w.size()) return INFINITY;
    for (size_t i = 0; i < w.size(); ++i) {
      diff = std::max(diff, std::fabs(double{it->second[i]} - w[i]));
      scale = std::max(scale, std::fabs(double{w[i]}));
    }
  }
  return diff / scale;
}

// Clipping by global norm spans the stages: their sums of squares add up to
// the whole model's, so two stages (and two pipelines of two) clip as one
// rank accumulating the same micro-batches does. The norm's sum runs in
// another order than one rank's (per stage, then across), so the factor may
// differ in its last bits: 1e-5 relative, and clipping must change the
// result for the comparison to mean anything.
TEST(PipelineTrainTest, ClippingByGlobalNormSpansTheStages) {
  v1::JobSpec spec = MlpJob();
  const Alone unclipped = RunAlone(spec, 4);
  spec.mutable_training()->set_clip_grad_norm(0.25f);
  const Alone one = RunAlone(spec, 4);
  ASSERT_FALSE(one.values.empty());
  EXPECT_GT(RelDiff(unclipped.values, one.values), 1e-2) << "0.25 did not clip";
  const Named piped = RunStages(Pipelined(spec, 2, 1, 2, 4, "1f1b", {"fc2"}), 2, "");
  EXPECT_LE(RelDiff(piped, one.values), 1e-5);

  v1::JobSpec two = spec;
  two.mutable_training()->set_batch_size(128);
  v1::JobSpec dp = two;
  dp.mutable_training()->set_accumulation_steps(4);
  const Alone ranks = RunLocal(dp, 2, 0, 1);
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(Pipelined(two, 2, 2, 2, 4, "gpipe", {"fc2"}), 2, 2, &store);
  RunWorkers(w);
  for (auto& x : w) ASSERT_TRUE(x.status.ok()) << x.status;
  Named p0;
  Collect(*w[0].trainer, 0, 2, &p0);
  EXPECT_LE(RelDiff(p0, ranks.values), 1e-5);
  std::printf(
      "clip 0.25: 2 stages vs one rank %.3g, 2x2 vs 2 ranks %.3g (unclipped differs %.3g)\n",
      RelDiff(piped, one.values), RelDiff(p0, ranks.values), RelDiff(unclipped.values, one.values));
}

}  // namespace
}  // namespace yoke::worker
