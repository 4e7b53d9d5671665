#include "trainer/trainer.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/read_file.h"
#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "engine/checkpoint.h"
#include "engine/kernels/cpu/conv.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/tensorboard.pb.h"
#include "telemetry/tensorboard.h"
#include "trainer/progress.h"

namespace yoke::worker {
namespace {

// A small CNN with dropout and batch norm on 2,000 real Fashion-MNIST
// images: it exercises every piece of state a resume must restore
// (parameters, running statistics, momentum, data position, dropout masks).
v1::JobSpec SmallJob(const std::string& ckpt_dir, int64_t max_steps, int epochs = 3) {
  std::string yaml = R"(
model:
  layers:
    - conv2d: {filters: 4, kernel: 3}
    - batch_norm: {}
    - relu
    - max_pool2d: {size: 2}
    - flatten
    - dense: {units: 32}
    - relu
    - dropout: {rate: 0.3}
    - dense: {units: 10}
data:
  train: {format: idx, num_examples: 2000,
          images: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz,
          labels: /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz}
  test: {format: idx, num_examples: 500,
         images: /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz,
         labels: /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz}
  transform: {divisor: 255}
training:
  epochs: 3
  batch_size: 48
  seed: 7
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9, nesterov: true, weight_decay: 0.0001}
  schedule: {type: cosine, warmup_steps: 10}
)";
  auto spec = common::LoadJobSpecString(yaml, {}, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->mutable_training()->set_max_steps(max_steps);
  spec->mutable_training()->set_epochs(epochs);
  if (!ckpt_dir.empty()) spec->mutable_checkpoint()->set_dir(ckpt_dir);
  return *spec;
}

std::vector<float> Params(Trainer& t) {
  const engine::Tensor& v = t.model().params().flat_values();
  return std::vector<float>(v.data<float>(), v.data<float>() + v.numel());
}
std::vector<float> State(Trainer& t) {
  const engine::Tensor& v = t.model().params().flat_state();
  return std::vector<float>(v.data<float>(), v.data<float>() + v.numel());
}

// Stops its trainer once `stop_at` steps are done, as SIGTERM would.
class StopAt final : public ProgressSink {
 public:
  explicit StopAt(int64_t stop_at) : stop_at_(stop_at) {}
  void OnStep(const v1::StepProgress& p) override {
    if (p.step() >= stop_at_ && trainer != nullptr) trainer->RequestStop();
  }
  Trainer* trainer = nullptr;

 private:
  int64_t stop_at_;
};

// Train N steps, get interrupted (checkpoint), resume, train the rest:
// bit-identical to training straight through. N = 50 stops mid-epoch (42
// steps per epoch), so the data position inside an epoch is exercised as
// well as the epoch boundary after it.
TEST(TrainerTest, ResumeIsBitIdentical) {
  const int64_t n = 50, total = 110;
  auto straight = Trainer::Create(SmallJob("", total), {});
  ASSERT_TRUE(straight.ok()) << straight.status();
  auto r0 = (*straight)->Run();
  ASSERT_TRUE(r0.ok()) << r0.status();
  EXPECT_EQ(r0->steps(), total);

  common::TempDir tmp("yoke_trainer");  // removed with its files at the end
  std::string dir = tmp.path();
  StopAt stopper(n);
  TrainerOptions stop_opts;
  stop_opts.progress = &stopper;
  v1::JobSpec interrupted = SmallJob(dir, total);
  interrupted.mutable_training()->set_log_every_steps(1);
  auto first = Trainer::Create(interrupted, stop_opts);
  ASSERT_TRUE(first.ok()) << first.status();
  stopper.trainer = first->get();
  auto r1 = (*first)->Run();
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_EQ(r1->steps(), n);
  ASSERT_FALSE(r1->checkpoint().empty());
  // The partial run really is somewhere else.
  EXPECT_NE(Params(**first), Params(**straight));

  TrainerOptions opts;
  opts.resume = r1->checkpoint();
  auto second = Trainer::Create(SmallJob("", total), opts);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->global_step(), n);
  auto r2 = (*second)->Run();
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->steps(), total);

  std::vector<float> a = Params(**straight), b = Params(**second);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
      << "parameters differ after resume";
  std::vector<float> sa = State(**straight), sb = State(**second);
  EXPECT_EQ(0, std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)))
      << "batch-norm running statistics differ after resume";
  EXPECT_EQ(r0->test_accuracy(), r2->test_accuracy());
}

// Records the epochs a trainer reports.
class EpochLog final : public ProgressSink {
 public:
  void OnEpoch(const v1::EpochResult& e) override { epochs.push_back(e); }
  std::vector<v1::EpochResult> epochs;
};

// A checkpoint carries the results of the epochs before it, and a run that
// resumes from it reports them again: an epoch whose report died with a
// crashed worker still reaches the job's history. 42 steps per epoch: the
// first run stops in epoch 2, after epoch 1's result.
TEST(TrainerTest, CheckpointCarriesTheEpochHistoryAndResumeReportsIt) {
  common::TempDir tmp("yoke_trainer");  // removed with its files at the end
  std::string dir = tmp.path();
  StopAt stopper(50);
  EpochLog first_log;
  TeeProgress tee(&stopper, &first_log);
  TrainerOptions stop_opts;
  stop_opts.progress = &tee;
  v1::JobSpec spec = SmallJob(dir, 0, 3);
  spec.mutable_training()->set_log_every_steps(1);
  auto first = Trainer::Create(spec, stop_opts);
  ASSERT_TRUE(first.ok()) << first.status();
  stopper.trainer = first->get();
  auto r1 = (*first)->Run();
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_EQ(first_log.epochs.size(), 1u);
  auto ck = engine::ReadCheckpoint(r1->checkpoint());
  ASSERT_TRUE(ck.ok()) << ck.status();
  ASSERT_EQ(ck->header.history_size(), 1);
  EXPECT_EQ(ck->header.history(0).SerializeAsString(), first_log.epochs[0].SerializeAsString());

  EpochLog second_log;
  TrainerOptions opts;
  opts.resume = r1->checkpoint();
  opts.progress = &second_log;
  auto second = Trainer::Create(spec, opts);
  ASSERT_TRUE(second.ok()) << second.status();
  // Epoch 1 again, from the checkpoint, before a step is taken.
  ASSERT_EQ(second_log.epochs.size(), 1u);
  EXPECT_EQ(second_log.epochs[0].SerializeAsString(), first_log.epochs[0].SerializeAsString());
  auto r2 = (*second)->Run();
  ASSERT_TRUE(r2.ok()) << r2.status();
  std::vector<int> numbers;
  for (const auto& e : second_log.epochs) numbers.push_back(e.epoch());
  EXPECT_EQ(numbers, (std::vector<int>{1, 2, 3}));
  ASSERT_EQ(r2->history_size(), 3);
  EXPECT_EQ(r2->history(0).SerializeAsString(), first_log.epochs[0].SerializeAsString());
}

TEST(TrainerTest, ResumeRejectsAMismatchedModel) {
  common::TempDir tmp("yoke_trainer");  // removed with its files at the end
  std::string dir = tmp.path();
  auto first = Trainer::Create(SmallJob(dir, 5), {});
  ASSERT_TRUE(first.ok());
  auto r = (*first)->Run();
  ASSERT_TRUE(r.ok());
  v1::JobSpec other = SmallJob("", 10);
  other.mutable_model()->mutable_layers(5)->mutable_dense()->set_units(64);
  TrainerOptions opts;
  opts.resume = r->checkpoint();
  auto t = Trainer::Create(other, opts);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("different model"), std::string::npos) << t.status();
}

TEST(TrainerTest, CreateFailsCleanlyOnBadInput) {
  v1::JobSpec spec = SmallJob("", 5);
  spec.mutable_data()->mutable_train()->set_images("/nonexistent/images.gz");
  auto t = Trainer::Create(spec, {});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("/nonexistent/images.gz"), std::string::npos);

  spec = SmallJob("", 5);
  spec.mutable_training()->set_batch_size(0);
  t = Trainer::Create(spec, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("training.batch_size"), std::string::npos);
}

TEST(TrainerTest, LearnsAndCheckpointsKeepLastK) {
  common::TempDir tmp("yoke_trainer");  // removed with its files at the end
  std::string dir = tmp.path();
  v1::JobSpec spec = SmallJob(dir, 0, 2);
  spec.mutable_checkpoint()->set_every_steps(10);
  spec.mutable_checkpoint()->set_keep(2);
  auto t = Trainer::Create(spec, {});
  ASSERT_TRUE(t.ok()) << t.status();
  auto r = (*t)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->epochs(), 2);
  EXPECT_EQ(r->steps(), 84);
  // 2,000 images, 84 steps: far better than the 10% of chance.
  EXPECT_GT(r->test_accuracy(), 0.6);
  ASSERT_EQ(r->history_size(), 2);
  EXPECT_LT(r->history(1).train_loss(), r->history(0).train_loss());
  auto latest = engine::LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, engine::CheckpointPath(dir, 84));
  ASSERT_TRUE(engine::PruneCheckpoints(dir, 0).ok());
  // Only the newest two survive.
  EXPECT_TRUE(engine::ReadCheckpoint(engine::CheckpointPath(dir, 80)).ok());
  EXPECT_FALSE(engine::ReadCheckpoint(engine::CheckpointPath(dir, 70)).ok());
}

// Global rank 0 writes TensorBoard events beside the checkpoints: every log
// step's training scalars and every epoch's test accuracy, equal to what the
// run reports, and the spec as text.
TEST(TrainerTest, WritesTensorBoardEventsBesideTheCheckpoints) {
  common::TempDir tmp("yoke_trainer");  // removed with its files at the end
  std::string dir = tmp.path();
  v1::JobSpec spec = SmallJob(dir, 0, 2);
  spec.mutable_training()->set_log_every_steps(10);
  auto t = Trainer::Create(spec, {});
  ASSERT_TRUE(t.ok()) << t.status();
  auto r = (*t)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  t->reset();  // closes the event file
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/tensorboard")) {
    files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("events.out.tfevents."), std::string::npos) << files[0];
  auto bytes = common::ReadRegularFile(files[0], 64 << 20, "event file");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto records = common::ParseTfRecords(*bytes, files[0]);
  ASSERT_TRUE(records.ok()) << records.status();
  std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars;
  bool spec_text = false;
  for (const std::string& rec : *records) {
    tensorboard::Event ev;
    ASSERT_TRUE(ev.ParseFromString(rec));
    for (const auto& v : ev.summary().value()) {
      if (v.has_tensor()) {
        spec_text |= v.tag() == "hparams/spec" && v.tensor().string_val_size() == 1 &&
                     v.tensor().string_val(0).find("batch_size: 48") != std::string::npos;
      } else {
        scalars[v.tag()].push_back({ev.step(), v.simple_value()});
      }
    }
  }
  EXPECT_TRUE(spec_text);
  // 84 steps: logged at 10, 20, ..., 80 and at the two epoch ends (42, 84).
  ASSERT_EQ(scalars["train/loss"].size(), 10u);
  EXPECT_EQ(scalars["train/loss"].back().first, 84);
  for (const auto& [step, loss] : scalars["train/loss"]) EXPECT_GT(loss, 0.0f) << step;
  ASSERT_EQ(scalars["epoch/test_accuracy"].size(), 2u);
  EXPECT_EQ(scalars["epoch/test_accuracy"][1].first, 84);
  EXPECT_EQ(scalars["epoch/test_accuracy"][1].second,
            static_cast<float>(r->history(1).test_accuracy()));
  EXPECT_EQ(scalars["epoch/test_accuracy"][0].second,
            static_cast<float>(r->history(0).test_accuracy()));
  EXPECT_EQ(scalars["train/learning_rate"].size(), 10u);

  // "off" writes none.
  common::TempDir tmp2("yoke_trainer");
  std::string dir2 = tmp2.path();
  v1::JobSpec off = SmallJob(dir2, 5, 1);
  off.mutable_logging()->set_tensorboard_dir("off");
  auto t2 = Trainer::Create(off, {});
  ASSERT_TRUE(t2.ok()) << t2.status();
  ASSERT_TRUE((*t2)->Run().ok());
  EXPECT_FALSE(std::filesystem::exists(dir2 + "/tensorboard"));
}

// training.precision: bf16 (oneDNN's AMX or AVX-512 BF16 convolutions)
// trains a two-convolution net on real images as far as fp32 does. The
// first convolution has one input channel and stays fp32 (the direct
// kernels); the second computes in bf16.
TEST(TrainerTest, Bf16TrainsAsFarAsFp32) {
  if (!engine::cpu::CpuHasNativeBf16()) {
    GTEST_SKIP() << "no AVX-512 BF16 or AMX on this CPU (oneDNN ISA " << engine::cpu::CpuIsaName()
                 << ")";
  }
  std::map<std::string, v1::TrainResult> results;
  for (const std::string precision : {"fp32", "bf16"}) {
    v1::JobSpec spec = SmallJob("", 0, 2);
    // conv2d, batch_norm, relu, max_pool2d, then a second such block of 16
    // filters before the dense layers.
    auto* layers = spec.mutable_model()->mutable_layers();
    v1::ModelSpec rebuilt;
    for (int i = 0; i < layers->size(); ++i) {
      *rebuilt.add_layers() = layers->Get(i);
      if (i == 3) {
        for (int j = 0; j < 4; ++j) *rebuilt.add_layers() = layers->Get(j);
        rebuilt.mutable_layers(4)->mutable_conv2d()->set_filters(16);
      }
    }
    *spec.mutable_model() = rebuilt;
    spec.mutable_training()->set_precision(precision);
    auto t = Trainer::Create(spec, {});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->model().bf16(), precision == "bf16");
    auto r = (*t)->Run();
    ASSERT_TRUE(r.ok()) << r.status();
    results[precision] = *r;
  }
  std::printf("test accuracy after 2 epochs: fp32 %.3f, bf16 %.3f\n",
              results["fp32"].test_accuracy(), results["bf16"].test_accuracy());
  EXPECT_GT(results["bf16"].test_accuracy(), 0.6);
  EXPECT_NEAR(results["bf16"].test_accuracy(), results["fp32"].test_accuracy(), 0.03);
  EXPECT_NEAR(results["bf16"].train_loss(), results["fp32"].train_loss(),
              0.1 * results["fp32"].train_loss());
}

// training.recompute and training.recompute_batch_norm through the trainer:
// a ResNet trains to exactly the parameters, batch-norm statistics and
// losses of the run that keeps every activation, with evaluation between
// the epochs.
TEST(TrainerTest, RecomputeTrainsTheSameToTheBit) {
  const std::vector<std::string> keeps = {"", "recompute", "recompute_batch_norm"};
  std::map<std::string, std::vector<float>> params, state;
  std::map<std::string, v1::TrainResult> results;
  for (const std::string& keep : keeps) {
    SCOPED_TRACE(keep);
    auto spec = common::LoadJobSpecString(R"(
model: {zoo: resnet20, width: 4}
data:
  train: {format: synthetic, shape: [16, 16, 3], num_classes: 4, num_examples: 96, seed: 3}
  test: {format: synthetic, shape: [16, 16, 3], num_classes: 4, num_examples: 32, seed: 4}
training:
  epochs: 2
  batch_size: 16
  seed: 5
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
)",
                                          {}, "test");
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec->mutable_training()->set_recompute(keep == "recompute");
    spec->mutable_training()->set_recompute_batch_norm(keep == "recompute_batch_norm");
    auto t = Trainer::Create(*spec, {});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->model().recompute(), keep == "recompute");
    EXPECT_EQ((*t)->model().recompute_batch_norm(), keep == "recompute_batch_norm");
    auto r = (*t)->Run();
    ASSERT_TRUE(r.ok()) << r.status();
    results[keep] = *r;
    params[keep] = Params(**t);
    state[keep] = State(**t);
  }
  for (const std::string& keep : {keeps[1], keeps[2]}) {
    SCOPED_TRACE(keep);
    EXPECT_EQ(params[keep], params[""]);
    EXPECT_EQ(state[keep], state[""]);
    EXPECT_EQ(results[keep].train_loss(), results[""].train_loss());
    EXPECT_EQ(results[keep].test_accuracy(), results[""].test_accuracy());
    EXPECT_EQ(results[keep].steps(), 12);
  }
}

}  // namespace
}  // namespace yoke::worker
