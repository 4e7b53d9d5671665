// Synchronous data parallelism end to end, over real Gloo on loopback: N
// ranks with per-replica batch B train the same model as one replica with
// batch N·B; a rank that falls out fails the others with a clear error.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/store.h"
#include "common/testing/temp_dir.h"
#include "config/config.h"
#include "data/open_dataset.h"
#include "data/pipeline.h"
#include "engine/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer/testing/trainer_runs.h"
#include "trainer/trainer.h"

namespace yoke::worker {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using testing::MakeWorkers;
using testing::Params;
using testing::RelMaxDiff;
using testing::RunWorkers;
using testing::TrainAlone;
using testing::Worker;

// configs/fashion_mnist_mlp.yaml (no dropout), on the first 4,000 training
// images, without evaluation.
v1::JobSpec MlpJob(int batch, int64_t max_steps) {
  std::string yaml = R"(
model:
  layers:
    - flatten
    - dense: {units: 256}
    - relu
    - dense: {units: 128}
    - relu
    - dense: {units: 10}
data:
  train: {format: idx, num_examples: 4000,
          images: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz,
          labels: /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz}
  transform: {divisor: 255}
training:
  epochs: 1
  seed: 1
  loss: softmax_cross_entropy
  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}
  threads: 2
)";
  auto spec = common::LoadJobSpecString(yaml, {}, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->mutable_training()->set_batch_size(batch);
  spec->mutable_training()->set_max_steps(max_steps);
  return *spec;
}

// Tolerance. Both runs do the same arithmetic except how the batch's
// gradient sum is split: one GEMM over 64 (or 128) rows, versus 2 (or 4)
// GEMMs over 32 rows added by the allreduce; the 1/batch scaling is a power
// of two either way, so it is exact. A different summation order perturbs
// each gradient by a few f32 ulps (~1e-7 relative); momentum SGD carries and
// the network mildly amplifies such perturbations over 20 steps. 1e-5 of the
// weights' scale is ~100x the single-step rounding, yet far below any real
// divergence (a wrong average, a missed bucket or a stale gradient shifts the
// weights by ~1e-3 of their scale within a step or two).
constexpr double kTolerance = 1e-5;

TEST(DataParallelTest, TwoRanksMatchOneReplicaWithTheGlobalBatch) {
  const v1::JobSpec spec = MlpJob(64, 20);
  const std::vector<float> alone = TrainAlone(spec);
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(spec, 2, 1, &store);
  RunWorkers(w);
  for (auto& x : w) ASSERT_TRUE(x.status.ok()) << x.status;
  EXPECT_EQ(w[0].steps, 20);
  const std::vector<float> p0 = Params(*w[0].trainer), p1 = Params(*w[1].trainer);
  EXPECT_EQ(p0, p1);  // every rank applies the same reduced gradients
  const double d = RelMaxDiff(p0, alone);
  std::printf(
      "[ measured ] 2x1 ranks (batch 32 each) vs 1 replica (batch 64), 20 steps: "
      "max |diff| / max |w| = %.3g (bound %.0e)\n",
      d, kTolerance);
  EXPECT_LE(d, kTolerance);
  EXPECT_GT(RelMaxDiff(alone, TrainAlone(MlpJob(32, 20))), 1e-3)
      << "the comparison cannot tell batch 32 from batch 64";
}

TEST(DataParallelTest, TwoWorkersOfTwoReplicasMatchOneReplicaWithBatch128) {
  const v1::JobSpec spec = MlpJob(128, 20);
  const std::vector<float> alone = TrainAlone(spec);
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(spec, 2, 2, &store);
  RunWorkers(w);
  for (auto& x : w) ASSERT_TRUE(x.status.ok()) << x.status;
  const std::vector<float> p = Params(*w[0].trainer);
  EXPECT_EQ(Params(*w[0].trainer, 1), p);
  EXPECT_EQ(Params(*w[1].trainer, 0), p);
  EXPECT_EQ(Params(*w[1].trainer, 1), p);
  const double d = RelMaxDiff(p, alone);
  std::printf(
      "[ measured ] 2 workers x 2 replicas (batch 32 each) vs 1 replica (batch 128), "
      "20 steps: max |diff| / max |w| = %.3g (bound %.0e)\n",
      d, kTolerance);
  EXPECT_LE(d, kTolerance);
}

// The MLP with BatchNorm after each hidden dense layer.
v1::JobSpec BatchNormJob(int batch, int64_t max_steps, bool sync) {
  v1::JobSpec spec = MlpJob(batch, max_steps);
  auto yaml = common::LoadJobSpecString(R"(
model:
  layers:
    - flatten
    - dense: {units: 64}
    - batch_norm
    - relu
    - dense: {units: 32}
    - batch_norm
    - relu
    - dense: {units: 10}
)",
                                        {}, "test");
  EXPECT_TRUE(yaml.ok()) << yaml.status();
  *spec.mutable_model() = yaml->model();
  spec.mutable_distribution()->set_sync_batch_norm(sync);
  return spec;
}

std::vector<float> State(Trainer& t, int replica = 0) {
  const engine::Tensor& v = t.model(replica).params().flat_state();
  return std::vector<float>(v.data<float>(), v.data<float>() + v.numel());
}

// With synchronized BatchNorm, 2 workers x 2 replicas (batch 32 each) equal
// one replica with batch 128, running statistics included; with per-replica
// statistics (the default) they do not, which shows the comparison can fail.
// Tolerance: as kTolerance's, plus the synchronized statistics are summed in
// another order (double per rank, f32 over the wire) than oneDNN's; BatchNorm
// divides by the batch's standard deviation, which amplifies such rounding a
// little, so the bound is 1e-4 of the weights' scale, still ~10x below the
// per-replica-statistics run's difference after one step.
TEST(DataParallelTest, SyncBatchNormMatchesOneReplicaWithTheGlobalBatch) {
  auto one = Trainer::Create(BatchNormJob(128, 20, /*sync=*/false), TrainerOptions());
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE((*one)->Run().ok());
  const std::vector<float> alone = Params(**one);
  double diff[2];
  for (bool sync : {true, false}) {
    collective::InMemoryStore store;
    std::vector<Worker> w = MakeWorkers(BatchNormJob(128, 20, sync), 2, 2, &store);
    RunWorkers(w);
    for (auto& x : w) ASSERT_TRUE(x.status.ok()) << x.status;
    const std::vector<float> p = Params(*w[0].trainer);
    EXPECT_EQ(Params(*w[1].trainer, 1), p);
    diff[sync] = RelMaxDiff(p, alone);
    // Synchronized, every rank's running statistics are the global batch's.
    if (sync) {
      EXPECT_LE(RelMaxDiff(State(*w[1].trainer, 1), State(**one)), 1e-4);
    }
  }
  std::printf(
      "[ measured ] 2 workers x 2 replicas vs 1 replica (batch 128), 20 steps, "
      "BatchNorm: max |diff| / max |w| = %.3g synchronized (bound 1e-4), %.3g "
      "per-replica statistics\n",
      diff[1], diff[0]);
  EXPECT_LE(diff[1], 1e-4);
  EXPECT_GT(diff[0], 1e-3) << "the comparison cannot tell synchronized statistics apart";
}

// training.recompute_batch_norm with synchronized statistics: backward
// applies each batch norm again with the step's global statistics, kept
// from its Forward, and runs no collective of its own, so 2 workers x 2
// replicas train to the same bits as without it, while holding less.
TEST(DataParallelTest, SyncBatchNormAppliedAgainInBackwardTrainsTheSame) {
  std::vector<float> params[2], state[2];
  int64_t held[2];
  for (const bool again : {false, true}) {
    v1::JobSpec spec = BatchNormJob(128, 20, /*sync=*/true);
    spec.mutable_training()->set_recompute_batch_norm(again);
    collective::InMemoryStore store;
    std::vector<Worker> w = MakeWorkers(spec, 2, 2, &store);
    RunWorkers(w);
    for (auto& x : w) ASSERT_TRUE(x.status.ok()) << x.status;
    ASSERT_EQ(w[1].trainer->model(1).recompute_batch_norm(), again);
    params[again] = Params(*w[1].trainer, 1);
    state[again] = State(*w[1].trainer, 1);
    held[again] = w[1].trainer->model(1).HeldActivationBytes();
  }
  EXPECT_EQ(params[1], params[0]);
  EXPECT_EQ(state[1], state[0]);
  // Both hidden batch norms (32 x 64 and 32 x 32 floats) share one slot.
  EXPECT_EQ(held[0] - held[1], 32 * 32 * 4);
}

TEST(DataParallelTest, SyncBatchNormRefusesAStepThatLeavesARankWithoutSamples) {
  // 3,969 examples in batches of 64: the last step has 1 example for 2 ranks.
  v1::JobSpec spec = BatchNormJob(64, 0, /*sync=*/true);
  spec.mutable_data()->mutable_train()->set_num_examples(3969);
  TrainerOptions o;
  o.world_size = 2;
  collective::InMemoryStore store;
  o.store = &store;
  auto t = Trainer::Create(spec, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("distribution.sync_batch_norm"));
  EXPECT_THAT(t.status().message(), HasSubstr("has 1 of the 3969"));
}

// One step on 2 ranks against a hand-made update: the full global batch's
// gradient from a plain Model forward/backward (mean loss), then
// p -= lr * g (the first momentum step is v = g).
TEST(DataParallelTest, FirstStepMatchesAHandComputedUpdate) {
  const v1::JobSpec spec = MlpJob(64, 1);
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(spec, 2, 1, &store);
  RunWorkers(w);
  for (auto& x : w) ASSERT_TRUE(x.status.ok()) << x.status;

  auto ds = data::OpenDataset(spec.data().train(), "data.train");
  ASSERT_TRUE(ds.ok()) << ds.status();
  data::SamplerOptions so;
  so.batch_size = 64;
  so.seed = spec.training().seed();
  data::PipelineOptions po;  // the whole global batch, as one rank of one
  std::shared_ptr<const data::Dataset> dataset = *std::move(ds);
  auto pipe = data::Pipeline::Create(dataset, so, spec.data().transform(), true, po);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  auto batch = (*pipe)->Next();
  ASSERT_TRUE(batch.ok() && batch->has_value());
  data::Batch& b = **batch;
  ASSERT_EQ(b.n, 64);

  auto model = engine::Model::Create(spec.model(), {28, 28, 1}, 10);
  ASSERT_TRUE(model.ok()) << model.status();
  engine::ParamSet& ps = (*model)->params();
  ps.Initialize(spec.training().seed());
  auto loss = engine::CreateLoss("softmax_cross_entropy");
  ASSERT_TRUE(loss.ok());
  engine::LayerContext ctx;
  ctx.seed = spec.training().seed();
  auto logits =
      (*model)->Forward(engine::Tensor::Wrap(b.x.data(), b.x_shape(), engine::DType::kF32), ctx);
  ASSERT_TRUE(logits.ok()) << logits.status();
  engine::Tensor dlogits = engine::Tensor::Empty(logits->shape());
  ASSERT_TRUE((*loss)
                  ->Compute(*logits, engine::Tensor::Wrap(b.y.data(), {b.n}, engine::DType::kI32),
                            1.0f / 64, &dlogits)
                  .ok());
  ASSERT_TRUE((*model)->Backward(dlogits, ctx).ok());
  std::vector<float> want(ps.flat_values().numel());
  const float lr = spec.training().optimizer().lr();
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = ps.flat_values().data<float>()[i] - lr * ps.flat_grads().data<float>()[i];
  }
  const double d = RelMaxDiff(Params(*w[1].trainer), want);
  std::printf(
      "[ measured ] 1 step on 2 ranks vs hand-computed SGD update: "
      "max |diff| / max |w| = %.3g\n",
      d);
  // One step: only the gradient's summation order differs (~1e-7).
  EXPECT_LE(d, 1e-6);
}

// Rank 1 runs out of steps (its spec says 3) while rank 0 goes on: rank 0's
// next collective fails promptly with the communicator's message, instead of
// hanging.
TEST(DataParallelTest, ARankThatStopsEarlyFailsTheOtherClearly) {
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(MlpJob(64, 10), 2, 1, &store);
  w[1].spec.mutable_training()->set_max_steps(3);
  for (auto& x : w) x.options.collective_timeout = absl::Seconds(3);
  const auto start = std::chrono::steady_clock::now();
  RunWorkers(w);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(w[1].status.ok()) << w[1].status;
  ASSERT_FALSE(w[0].status.ok());
  std::printf("[ measured ] rank 0 failed after %.1f s: %s\n", seconds,
              w[0].status.ToString().c_str());
  EXPECT_THAT(w[0].status.code(),
              AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded,
                    absl::StatusCode::kAborted));
  EXPECT_THAT(w[0].status.message(), HasSubstr("allreduce"));
  EXPECT_THAT(w[0].status.message(), HasSubstr("rank 0 of 2"));
  EXPECT_LT(seconds, 30);
  EXPECT_EQ(w[0].steps, 3);
}

// A rank that never shows up: the rendezvous fails within the timeout.
TEST(DataParallelTest, AMissingRankFailsTheRendezvous) {
  collective::InMemoryStore store;
  std::vector<Worker> w = MakeWorkers(MlpJob(64, 10), 2, 1, &store);
  w.resize(1);
  w[0].options.collective_timeout = absl::Seconds(2);
  RunWorkers(w);
  ASSERT_FALSE(w[0].status.ok());
  std::printf("[ measured ] %s\n", w[0].status.ToString().c_str());
  EXPECT_EQ(w[0].status.code(), absl::StatusCode::kDeadlineExceeded) << w[0].status;
}

// Asks its trainer to stop once `at` steps are done, as SIGTERM would.
class StopAt final : public ProgressSink {
 public:
  explicit StopAt(int64_t at) : at_(at) {}
  void OnStep(const v1::StepProgress& p) override {
    if (p.step() >= at_ && trainer != nullptr) trainer->load()->RequestStop();
  }
  std::atomic<Trainer*>* trainer = nullptr;

 private:
  int64_t at_;
};

// A stop request on one rank (here rank 1's process) stops every rank after
// the same step, and rank 0 checkpoints there with world_size 2; every rank
// resumes from that checkpoint, and the result equals an uninterrupted run.
TEST(DataParallelTest, StopIsAgreedAndResumeOnAllRanksContinuesExactly) {
  const common::TempDir tmp("yoke_dp");  // removed with its checkpoints at the end
  const std::string dir = tmp.path();
  v1::JobSpec spec = MlpJob(64, 12);
  spec.mutable_training()->set_log_every_steps(1);
  spec.mutable_checkpoint()->set_dir(dir);

  collective::InMemoryStore straight_store;
  std::vector<Worker> straight = MakeWorkers(spec, 2, 1, &straight_store);
  for (auto& x : straight) x.spec.mutable_checkpoint()->clear_dir();
  RunWorkers(straight);
  for (auto& x : straight) ASSERT_TRUE(x.status.ok()) << x.status;

  collective::InMemoryStore store;
  std::vector<Worker> first = MakeWorkers(spec, 2, 1, &store);
  StopAt stop(5);
  std::atomic<Trainer*> rank1{nullptr};
  stop.trainer = &rank1;
  first[1].options.progress = &stop;
  // RunWorkers creates the trainers; publish rank 1's before it steps.
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      auto t = Trainer::Create(first[i].spec, first[i].options);
      ASSERT_TRUE(t.ok()) << t.status();
      first[i].trainer = *std::move(t);
      if (i == 1) rank1.store(first[i].trainer.get());
      auto r = first[i].trainer->Run();
      first[i].status = r.status();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& x : first) ASSERT_TRUE(x.status.ok()) << x.status;
  const int64_t stopped = first[0].trainer->global_step();
  EXPECT_EQ(first[1].trainer->global_step(), stopped);
  EXPECT_GE(stopped, 5);
  EXPECT_LT(stopped, 12);
  const std::string ckpt = engine::CheckpointPath(dir, stopped);
  auto ck = engine::ReadCheckpoint(ckpt);
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->header.world_size(), 2);
  EXPECT_EQ(ck->header.step(), stopped);

  collective::InMemoryStore store2;
  std::vector<Worker> second = MakeWorkers(spec, 2, 1, &store2);
  for (auto& x : second) x.options.resume = ckpt;
  RunWorkers(second);
  for (auto& x : second) ASSERT_TRUE(x.status.ok()) << x.status;
  EXPECT_EQ(second[0].steps, 12);
  EXPECT_EQ(Params(*second[0].trainer), Params(*straight[0].trainer));
  EXPECT_EQ(Params(*second[1].trainer), Params(*straight[1].trainer));

  // A rank that does not see the checkpoint (checkpoint.dir not shared)
  // must not start at step 0 beside rank 0 at `stopped`: it fails, saying so.
  collective::InMemoryStore store3;
  std::vector<Worker> split = MakeWorkers(spec, 2, 1, &store3);
  split[0].options.resume = ckpt;
  for (auto& x : split) x.options.collective_timeout = absl::Seconds(20);
  RunWorkers(split);
  ASSERT_FALSE(split[1].status.ok());
  EXPECT_EQ(split[1].status.code(), absl::StatusCode::kFailedPrecondition) << split[1].status;
  EXPECT_NE(split[1].status.message().find(absl::StrCat("rank 1 would continue from step 0 (it "
                                                        "found no checkpoint) but rank 0 from "
                                                        "step ",
                                                        stopped)),
            std::string::npos)
      << split[1].status;
  EXPECT_NE(split[1].status.message().find("storage that every worker sees"), std::string::npos);
  EXPECT_FALSE(split[0].status.ok());  // its peer left: it fails too, never hangs
}

}  // namespace
}  // namespace yoke::worker
