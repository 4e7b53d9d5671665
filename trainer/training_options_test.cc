// The training options that `fit` users expect, end to end through the
// Trainer on real Fashion-MNIST data: gradient accumulation, clipping by
// global norm, the validation split and early stopping with the best
// checkpoint. Several compare against a plain run; each also checks that the
// comparison can fail.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "collective/store.h"
#include "common/read_file.h"
#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "data/open_dataset.h"
#include "data/validation_split.h"
#include "engine/checkpoint.h"
#include "gtest/gtest.h"
#include "proto/yoke/v1/tensorboard.pb.h"
#include "telemetry/tensorboard.h"
#include "trainer/progress.h"
#include "trainer/testing/trainer_runs.h"
#include "trainer/trainer.h"

namespace yoke::worker {
namespace {

using testing::Params;
using testing::RelMaxDiff;
using testing::TrainAlone;
using testing::Worker;

// The `world` single-replica trainers of one job, each on its own thread over
// `store`.
std::vector<Worker> RunRanks(const v1::JobSpec& spec, int world, collective::Store& store) {
  std::vector<Worker> ranks = testing::MakeWorkers(spec, world, 1, &store);
  testing::RunWorkers(ranks);
  return ranks;
}

// An MLP (no dropout, no BatchNorm) on the first `examples` training images.
v1::JobSpec MlpJob(int batch, int64_t max_steps, int64_t examples = 4000) {
  std::string yaml = R"(
model:
  layers:
    - flatten
    - dense: {units: 64}
    - relu
    - dense: {units: 10}
data:
  train: {format: idx,
          images: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz,
          labels: /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz}
  transform: {divisor: 255}
training:
  epochs: 1
  seed: 3
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
  threads: 2
)";
  auto spec = common::LoadJobSpecString(yaml, {}, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->mutable_data()->mutable_train()->set_num_examples(examples);
  spec->mutable_training()->set_batch_size(batch);
  spec->mutable_training()->set_max_steps(max_steps);
  return *spec;
}

void AddTestSet(v1::JobSpec& spec, int64_t examples) {
  v1::DatasetSpec* t = spec.mutable_data()->mutable_test();
  t->set_format("idx");
  t->set_images("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
  t->set_labels("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz");
  t->set_num_examples(examples);
}

// Tolerance of the accumulation comparisons. Both runs compute the same sum
// of per-sample gradients with the same 1/64 scale (a power of two, exact);
// only the order differs: one GEMM over 64 rows against 4 GEMMs over 16 rows
// added up in f32. That perturbs a gradient by a few ulps (~1e-7 relative);
// 20 momentum steps carry and mildly amplify it. 1e-5 of the weights' scale
// is ~100x that, and far below a real mistake: a 1/micro-batch scale (4x
// the step) or a lost micro-batch moves the weights by ~1e-2 of their scale.
constexpr double kTolerance = 1e-5;

TEST(TrainingOptionsTest, AccumulationEqualsOneBatchOfTheSameGlobalSize) {
  const std::vector<float> whole = TrainAlone(MlpJob(64, 20));
  v1::JobSpec spec = MlpJob(64, 20);
  spec.mutable_training()->set_accumulation_steps(4);
  const std::vector<float> accumulated = TrainAlone(spec);
  const double d = RelMaxDiff(accumulated, whole);
  std::printf(
      "[ measured ] batch 64 as 4 micro-batches of 16 vs batch 64, 20 steps: "
      "max |diff| / max |w| = %.3g (bound %.0e)\n",
      d, kTolerance);
  EXPECT_LE(d, kTolerance);
  // The comparison can fail: 20 steps of batch 16 (what a 1/16 scale per
  // micro-batch, without the sum, would amount to) land elsewhere.
  EXPECT_GT(RelMaxDiff(TrainAlone(MlpJob(16, 20)), whole), 1e-3);
}

// On 2 ranks the step's allreduce carries the micro-batches' sum, and a
// short last step (4,000 = 62·64 + 32, run to the end of the epoch) still
// averages over the samples it has.
TEST(TrainingOptionsTest, AccumulationOnTwoRanksEqualsOneReplica) {
  const std::vector<float> whole = TrainAlone(MlpJob(64, 0));
  v1::JobSpec spec = MlpJob(64, 0);
  spec.mutable_training()->set_accumulation_steps(2);
  collective::InMemoryStore store;
  std::vector<Worker> ranks = RunRanks(spec, 2, store);
  for (auto& r : ranks) ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(ranks[0].trainer->global_step(), 63);  // optimizer steps, not micro-batches
  const std::vector<float> p0 = Params(*ranks[0].trainer);
  EXPECT_EQ(p0, Params(*ranks[1].trainer));
  const double d = RelMaxDiff(p0, whole);
  std::printf(
      "[ measured ] 2 ranks x 2 micro-batches of 16 vs 1 replica batch 64, 63 steps: "
      "max |diff| / max |w| = %.3g (bound %.0e)\n",
      d, 2 * kTolerance);
  // 63 steps instead of 20: twice the bound.
  EXPECT_LE(d, 2 * kTolerance);
}

// Records every logged step.
class Steps final : public ProgressSink {
 public:
  void OnStep(const v1::StepProgress& p) override { steps.push_back(p); }
  void OnEpoch(const v1::EpochResult& e) override { epochs.push_back(e); }
  std::vector<v1::StepProgress> steps;
  std::vector<v1::EpochResult> epochs;
};

// One plain SGD step with lr 1 (no momentum, no weight decay): the update is
// exactly minus the (clipped) mean gradient.
std::vector<double> OneStepUpdate(float clip, double* logged_norm) {
  v1::JobSpec spec = MlpJob(64, 1);
  spec.mutable_training()->mutable_optimizer()->set_lr(1.0f);
  spec.mutable_training()->mutable_optimizer()->set_momentum(0.0f);
  spec.mutable_training()->set_clip_grad_norm(clip);
  spec.mutable_training()->set_log_every_steps(1);
  Steps sink;
  TrainerOptions o;
  o.progress = &sink;
  auto t = Trainer::Create(spec, o);
  EXPECT_TRUE(t.ok()) << t.status();
  const std::vector<float> before = Params(**t);
  EXPECT_TRUE((*t)->Run().ok());
  const std::vector<float> after = Params(**t);
  std::vector<double> delta(before.size());
  for (size_t i = 0; i < before.size(); ++i) delta[i] = double{after[i]} - before[i];
  if (logged_norm) *logged_norm = sink.steps.empty() ? -1 : sink.steps.back().grad_norm();
  return delta;
}

double Norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

TEST(TrainingOptionsTest, ClippingBoundsTheAppliedNormAndKeepsTheDirection) {
  const std::vector<double> g = OneStepUpdate(0.0f, nullptr);  // -gradient
  const double gnorm = Norm(g);
  ASSERT_GT(gnorm, 0.1);
  const float max = static_cast<float>(gnorm / 10);
  double logged = 0;
  const std::vector<double> clipped = OneStepUpdate(max, &logged);
  const double cnorm = Norm(clipped);
  std::printf("[ measured ] gradient norm %.4f, clipped to %.4f: applied %.6f\n", gnorm, max,
              cnorm);
  // The logged norm is the one before clipping.
  EXPECT_NEAR(logged, gnorm, 1e-4 * gnorm);
  // f32 parameters: the update is after - before, rounded at the weights'
  // scale, hence the small slack.
  EXPECT_LE(cnorm, max * (1 + 1e-4));
  EXPECT_GE(cnorm, max * (1 - 1e-3));
  double dot = 0;
  for (size_t i = 0; i < g.size(); ++i) dot += g[i] * clipped[i];
  EXPECT_GT(dot / (gnorm * cnorm), 1 - 1e-5) << "the clipped update turned";
  // A bound above the norm leaves the step untouched, bit for bit.
  EXPECT_EQ(OneStepUpdate(static_cast<float>(gnorm * 10), nullptr), g);
}

// Both ranks clip the same allreduced mean gradient: 2 ranks equal one
// replica with the global batch, clipping on every step (max 0.5 is below
// this MLP's gradient norms of ~1-3 early on).
TEST(TrainingOptionsTest, ClippingOnTwoRanksEqualsOneReplica) {
  v1::JobSpec spec = MlpJob(64, 20);
  spec.mutable_training()->set_clip_grad_norm(0.5f);
  const std::vector<float> alone = TrainAlone(spec);
  collective::InMemoryStore store;
  std::vector<Worker> ranks = RunRanks(spec, 2, store);
  for (auto& r : ranks) ASSERT_TRUE(r.status.ok()) << r.status;
  const std::vector<float> p0 = Params(*ranks[0].trainer);
  EXPECT_EQ(p0, Params(*ranks[1].trainer));
  EXPECT_LE(RelMaxDiff(p0, alone), kTolerance);
  EXPECT_GT(RelMaxDiff(TrainAlone(MlpJob(64, 20)), alone), 1e-3)
      << "clipping at 0.5 changed nothing: the test cannot tell";
}

// The scalars of the one event file in `dir`, by tag: (step, value).
std::map<std::string, std::vector<std::pair<int64_t, float>>> ReadScalars(const std::string& dir) {
  std::map<std::string, std::vector<std::pair<int64_t, float>>> scalars;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    auto bytes = common::ReadRegularFile(f.path(), 64 << 20, "event file");
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) continue;
    auto records = common::ParseTfRecords(*bytes, f.path());
    EXPECT_TRUE(records.ok()) << records.status();
    if (!records.ok()) continue;
    for (const std::string& rec : *records) {
      tensorboard::Event ev;
      EXPECT_TRUE(ev.ParseFromString(rec));
      for (const auto& v : ev.summary().value()) {
        if (!v.has_tensor()) scalars[v.tag()].push_back({ev.step(), v.simple_value()});
      }
    }
  }
  return scalars;
}

TEST(TrainingOptionsTest, ValidationSplitHoldsOutAFixedPartAndReportsIt) {
  v1::JobSpec spec = MlpJob(50, 0, 2000);
  spec.mutable_data()->set_validation_split(0.2f);
  const common::TempDir events_dir("yoke_options");
  const std::string& events = events_dir.path();
  spec.mutable_logging()->set_tensorboard_dir(events);
  spec.mutable_training()->set_epochs(2);
  Steps sink;
  TrainerOptions o;
  o.progress = &sink;
  auto t = Trainer::Create(spec, o);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_NE((*t)->validation_set(), nullptr);
  EXPECT_EQ((*t)->train_set().size(), 1600);
  EXPECT_EQ((*t)->validation_set()->size(), 400);
  // The trainer's parts are the split of data.train by training.seed.
  auto base = data::OpenDataset(spec.data().train(), "data.train");
  ASSERT_TRUE(base.ok()) << base.status();
  auto split = data::SplitForValidation(2000, 0.2, spec.training().seed());
  ASSERT_TRUE(split.ok());
  std::vector<float> a(784), b(784);
  for (int64_t i : {0, 17, 399}) {
    (*t)->validation_set()->ExampleAsFloat(i, a.data());
    (*base)->ExampleAsFloat(split->validation[i], b.data());
    EXPECT_EQ(a, b) << "validation example " << i;
  }
  for (int64_t i : {0, 800, 1599}) {
    (*t)->train_set().ExampleAsFloat(i, a.data());
    (*base)->ExampleAsFloat(split->train[i], b.data());
    EXPECT_EQ(a, b) << "training example " << i;
  }
  auto r = (*t)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps(), 2 * 32);  // 1,600 examples in batches of 50
  ASSERT_EQ(r->history_size(), 2);
  ASSERT_EQ(sink.epochs.size(), 2u);
  for (const v1::EpochResult& e : r->history()) {
    EXPECT_GT(e.validation_accuracy(), 0.5) << e.ShortDebugString();
    EXPECT_LE(e.validation_accuracy(), 1.0);
    EXPECT_GT(e.validation_loss(), 0.0);
    EXPECT_NE(e.validation_loss(), e.train_loss());
  }
  EXPECT_LT(r->history(1).validation_loss(), r->history(0).validation_loss());
  EXPECT_EQ(sink.epochs[1].validation_loss(), r->history(1).validation_loss());
  t->reset();  // closes the event file
  auto scalars = ReadScalars(events);
  ASSERT_EQ(scalars["validation/accuracy"].size(), 2u);
  EXPECT_EQ(scalars["validation/accuracy"][1].first, 64);
  EXPECT_EQ(scalars["validation/accuracy"][1].second,
            static_cast<float>(r->history(1).validation_accuracy()));
  ASSERT_EQ(scalars["validation/loss"].size(), 2u);
  EXPECT_EQ(scalars["validation/loss"][0].second,
            static_cast<float>(r->history(0).validation_loss()));
}

// 1,000 examples in batches of 200: 5 steps per epoch.
v1::JobSpec EarlyStoppingJob(const std::string& dir, float min_delta, int patience) {
  v1::JobSpec spec = MlpJob(200, 0, 1000);
  AddTestSet(spec, 500);
  spec.mutable_training()->set_epochs(8);
  v1::EarlyStoppingSpec* es = spec.mutable_training()->mutable_early_stopping();
  es->set_monitor("test_loss");
  es->set_patience(patience);
  es->set_min_delta(min_delta);
  if (!dir.empty()) {
    spec.mutable_checkpoint()->set_dir(dir);
    spec.mutable_checkpoint()->set_keep(10);
    spec.mutable_checkpoint()->set_keep_best(true);
  }
  return spec;
}

// No epoch can improve on the first by more than min_delta = 1e9: the run
// stops after 1 + patience epochs, and best.ckpt holds epoch 1's parameters.
TEST(TrainingOptionsTest, EarlyStoppingStopsAfterPatienceAndKeepsTheBest) {
  const common::TempDir tmp("yoke_options");
  const std::string& dir = tmp.path();
  auto t = Trainer::Create(EarlyStoppingJob(dir, 1e9f, 2), TrainerOptions());
  ASSERT_TRUE(t.ok()) << t.status();
  auto r = (*t)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->stopped_early());
  EXPECT_EQ(r->epochs(), 3);
  EXPECT_EQ(r->steps(), 15);
  EXPECT_EQ(r->history_size(), 3);
  EXPECT_EQ(r->best_epoch(), 1);
  ASSERT_EQ(r->best_checkpoint(), dir + "/best.ckpt");
  auto best = engine::ReadCheckpoint(r->best_checkpoint());
  auto epoch1 = engine::ReadCheckpoint(engine::CheckpointPath(dir, 5));
  auto epoch3 = engine::ReadCheckpoint(engine::CheckpointPath(dir, 15));
  ASSERT_TRUE(best.ok() && epoch1.ok() && epoch3.ok());
  EXPECT_EQ(best->header.step(), 5);
  auto values = [](const engine::Checkpoint& c) {
    const engine::Tensor* p = c.Find("params");
    return std::vector<float>(p->data<float>(), p->data<float>() + p->numel());
  };
  EXPECT_EQ(values(*best), values(*epoch1));
  EXPECT_NE(values(*best), values(*epoch3));

  // Resuming the finished run trains nothing more.
  TrainerOptions o;
  o.resume = engine::CheckpointPath(dir, 15);
  auto again = Trainer::Create(EarlyStoppingJob(dir, 1e9f, 2), o);
  ASSERT_TRUE(again.ok()) << again.status();
  auto r2 = (*again)->Run();
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ(r2->steps(), 15);
  EXPECT_TRUE(r2->stopped_early());
  EXPECT_EQ(r2->best_checkpoint(), dir + "/best.ckpt");
}

// A restart in the middle keeps counting: 2 epochs, a checkpoint, then a
// resumed run that stops after epoch 3 (epochs 2 and 3 did not improve).
TEST(TrainingOptionsTest, EarlyStoppingSurvivesARestart) {
  const common::TempDir tmp("yoke_options");
  const std::string& dir = tmp.path();
  v1::JobSpec first = EarlyStoppingJob(dir, 1e9f, 2);
  first.mutable_training()->set_max_steps(10);
  auto t = Trainer::Create(first, TrainerOptions());
  ASSERT_TRUE(t.ok()) << t.status();
  auto r = (*t)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stopped_early());
  EXPECT_EQ(r->epochs(), 2);

  TrainerOptions o;
  o.resume = engine::CheckpointPath(dir, 10);
  auto resumed = Trainer::Create(EarlyStoppingJob(dir, 1e9f, 2), o);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  auto r2 = (*resumed)->Run();
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_TRUE(r2->stopped_early());
  EXPECT_EQ(r2->steps(), 15);
  EXPECT_EQ(r2->best_epoch(), 1);
}

// A run that learns (the MLP's test loss falls in each of its first epochs)
// is not stopped, and its best epoch is its last.
TEST(TrainingOptionsTest, EarlyStoppingLetsAnImprovingRunFinish) {
  v1::JobSpec spec = EarlyStoppingJob("", 0.0f, 1);
  spec.mutable_training()->set_epochs(3);
  auto t = Trainer::Create(spec, TrainerOptions());
  ASSERT_TRUE(t.ok()) << t.status();
  auto r = (*t)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->stopped_early());
  EXPECT_EQ(r->epochs(), 3);
  EXPECT_EQ(r->best_epoch(), 3);
  EXPECT_TRUE(r->best_checkpoint().empty());
}

// The epochs a progress sink is told of, in order.
class EpochLog : public ProgressSink {
 public:
  void OnEpoch(const v1::EpochResult& e) override { epochs.push_back(e); }
  std::vector<v1::EpochResult> epochs;
};

// Keras' rule over a whole run of test losses: the first epoch, then each
// that improves on the best so far by more than `min_delta`.
int64_t BestEpoch(const std::vector<v1::EpochResult>& epochs, double min_delta) {
  int64_t best_epoch = 0;
  double best = 0;
  for (const v1::EpochResult& e : epochs) {
    if (best_epoch == 0 || best - e.test_loss() > min_delta) {
      best = e.test_loss();
      best_epoch = e.epoch();
    }
  }
  return best_epoch;
}

// A job of more epochs than a history keeps (1 step each): the result and
// the checkpoint hold a bounded history from the first epoch to the last,
// and early stopping still counts every epoch, across a restart too.
TEST(TrainingOptionsTest, AHistoryOfManyEpochsIsBoundedAndEarlyStoppingCountsThemAll) {
  const common::TempDir tmp("yoke_options");
  const std::string& dir = tmp.path();
  v1::JobSpec spec = MlpJob(100, 0, 100);
  AddTestSet(spec, 50);
  spec.mutable_training()->mutable_optimizer()->set_lr(0.002f);
  spec.mutable_training()->set_epochs(1100);
  v1::EarlyStoppingSpec* es = spec.mutable_training()->mutable_early_stopping();
  es->set_monitor("test_loss");
  es->set_patience(100000);
  es->set_min_delta(1e-4f);
  spec.mutable_checkpoint()->set_dir(dir);
  spec.mutable_checkpoint()->set_keep(1);
  EpochLog log;
  TrainerOptions o;
  o.progress = &log;
  auto t = Trainer::Create(spec, o);
  ASSERT_TRUE(t.ok()) << t.status();
  auto r = (*t)->Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(log.epochs.size(), 1100u);
  EXPECT_LE(r->history_size(), 1000);
  EXPECT_EQ(r->history(0).epoch(), 1);
  EXPECT_EQ(r->history(r->history_size() - 1).epoch(), 1100);
  const int64_t best = BestEpoch(log.epochs, 1e-4);
  EXPECT_GT(best, 1);  // the rule was exercised: the loss improved
  EXPECT_EQ(r->best_epoch(), best);
  auto ck = engine::ReadCheckpoint(engine::CheckpointPath(dir, 1100));
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_LE(ck->header.history_size(), 1000);
  EXPECT_EQ(ck->header.early_stopping().best_epoch(), best);

  // Resumed for 100 epochs more: the count goes on from the checkpoint's.
  spec.mutable_training()->set_epochs(1200);
  TrainerOptions again;
  again.progress = &log;
  again.resume = engine::CheckpointPath(dir, 1100);
  auto t2 = Trainer::Create(spec, again);
  ASSERT_TRUE(t2.ok()) << t2.status();
  auto r2 = (*t2)->Run();
  ASSERT_TRUE(r2.ok()) << r2.status();
  // The sink heard the restored epochs again (as the coordinator does), then
  // the new ones: the whole run is its first 1,100 and the last 100.
  ASSERT_GE(log.epochs.size(), 1200u);
  std::vector<v1::EpochResult> run(log.epochs.begin(), log.epochs.begin() + 1100);
  run.insert(run.end(), log.epochs.end() - 100, log.epochs.end());
  EXPECT_EQ(run.back().epoch(), 1200);
  EXPECT_EQ(r2->best_epoch(), BestEpoch(run, 1e-4));
  EXPECT_LE(r2->history_size(), 1000);
}

// Distributed, rank 0's decision stops every rank after the same step.
TEST(TrainingOptionsTest, EarlyStoppingStopsEveryRankTogether) {
  collective::InMemoryStore store;
  std::vector<Worker> ranks = RunRanks(EarlyStoppingJob("", 1e9f, 1), 2, store);
  for (auto& r : ranks) ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(ranks[0].trainer->global_step(), 10);
  EXPECT_EQ(ranks[1].trainer->global_step(), 10);
  EXPECT_TRUE(ranks[0].result.stopped_early());
  EXPECT_EQ(Params(*ranks[0].trainer), Params(*ranks[1].trainer));
}

}  // namespace
}  // namespace yoke::worker
