#include "data/pipeline.h"

#include <chrono>
#include <thread>

#include "data/synthetic_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

using Clock = std::chrono::steady_clock;

// 103 examples of (4, 4, 2) with value (7*i + j) % 256, label i % 5.
std::shared_ptr<const Dataset> Small() {
  const int n = 103, numel = 32;
  std::vector<uint8_t> v(n * numel);
  std::vector<int32_t> y(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < numel; ++j) v[i * numel + j] = static_cast<uint8_t>((7 * i + j) % 256);
    y[i] = i % 5;
  }
  return std::make_shared<ByteDataset>(std::vector<int64_t>{4, 4, 2}, 5, std::move(v),
                                       std::move(y));
}

v1::TransformSpec Augmenting() {
  v1::TransformSpec t;
  t.set_divisor(255);
  t.add_mean(0.5f);
  t.add_std(0.25f);
  t.set_random_crop_padding(1);
  t.set_horizontal_flip(true);
  return t;
}

SamplerOptions Options(int64_t batch, uint64_t seed) {
  SamplerOptions o;
  o.batch_size = batch;
  o.seed = seed;
  return o;
}

std::vector<Batch> Drain(Pipeline& p) {
  std::vector<Batch> out;
  for (;;) {
    auto b = p.Next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok() || !b->has_value()) break;
    out.push_back(std::move(**b));
  }
  return out;
}

void ExpectSame(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_TRUE(a.x == b.x) << "epoch " << a.epoch << " step " << a.step;
}

TEST(PipelineTest, MatchesDirectComputation) {
  auto ds = Small();
  const SamplerOptions so = Options(10, 3);
  PipelineOptions po;
  po.rank = 1;
  po.world_size = 3;
  po.end_epoch = 2;
  auto p = Pipeline::Create(ds, so, Augmenting(), /*train=*/true, po);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->steps_per_epoch(), 11);
  std::vector<Batch> got = Drain(**p);
  ASSERT_EQ(got.size(), 22u);

  auto sampler = Sampler::Create(ds->size(), so);
  auto t = Transform::Create(Augmenting(), ds->example_shape(), so.seed);
  ASSERT_TRUE(sampler.ok() && t.ok());
  size_t k = 0;
  for (int64_t e = 0; e < 2; ++e) {
    for (int64_t s = 0; s < 11; ++s, ++k) {
      const Batch& b = got[k];
      EXPECT_EQ(b.epoch, e);
      EXPECT_EQ(b.step, s);
      EXPECT_EQ(b.global_n, s == 10 ? 3 : 10);
      EXPECT_EQ(b.last_in_epoch, s == 10);
      EXPECT_EQ(b.example_shape, (std::vector<int64_t>{4, 4, 2}));
      const std::vector<int64_t> idx = (*sampler)->Indices(e, s, 1, 3);
      ASSERT_EQ(b.indices, idx);
      ASSERT_EQ(b.n, static_cast<int64_t>(idx.size()));
      EXPECT_EQ(b.x_shape(), (std::vector<int64_t>{b.n, 4, 4, 2}));
      ASSERT_EQ(b.x.size(), idx.size() * 32);
      for (size_t j = 0; j < idx.size(); ++j) {
        EXPECT_EQ(b.y[j], idx[j] % 5);
        std::vector<float> want(32);
        t->Apply(static_cast<const uint8_t*>(ds->Example(idx[j], nullptr)), want.data(), e, idx[j],
                 true);
        EXPECT_TRUE(std::equal(want.begin(), want.end(), b.x.begin() + j * 32))
            << "epoch " << e << " step " << s << " example " << j;
      }
    }
  }
  // The last step holds 3 examples: ranks get 1, 1, 1.
  EXPECT_EQ(got[10].n, 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got[0].x.data()) % 64, 0u);
}

TEST(PipelineTest, ResumeEqualsTailOfUninterruptedRun) {
  auto ds = Small();
  const SamplerOptions so = Options(8, 21);
  for (int world : {1, 2}) {
    PipelineOptions full;
    full.rank = world - 1;
    full.world_size = world;
    full.end_epoch = 3;
    auto p = Pipeline::Create(ds, so, Augmenting(), true, full);
    ASSERT_TRUE(p.ok()) << p.status();
    std::vector<Batch> all = Drain(**p);
    const int64_t steps = (*p)->steps_per_epoch();  // 13
    ASSERT_EQ(static_cast<int64_t>(all.size()), 3 * steps);

    for (auto [epoch, step] : {std::pair<int64_t, int64_t>{0, 0}, {1, 4}, {2, 12}, {1, 13}}) {
      PipelineOptions resume = full;
      resume.start_epoch = epoch;
      resume.start_step = step;
      resume.prefetch = 1;
      auto q = Pipeline::Create(ds, so, Augmenting(), true, resume);
      ASSERT_TRUE(q.ok()) << q.status();
      std::vector<Batch> tail = Drain(**q);
      const size_t skip = static_cast<size_t>(epoch * steps + step);
      ASSERT_EQ(tail.size(), all.size() - skip) << "resume at " << epoch << "/" << step;
      for (size_t i = 0; i < tail.size(); ++i) ExpectSame(tail[i], all[skip + i]);
    }
  }
}

TEST(PipelineTest, RecycledBuffersGiveTheSameBatches) {
  auto ds = Small();
  PipelineOptions po;
  po.end_epoch = 2;
  auto p = Pipeline::Create(ds, Options(16, 1), Augmenting(), true, po);
  auto q = Pipeline::Create(ds, Options(16, 1), Augmenting(), true, po);
  ASSERT_TRUE(p.ok() && q.ok());
  std::vector<Batch> want = Drain(**q);
  size_t k = 0;
  for (;;) {
    auto b = (*p)->Next();
    ASSERT_TRUE(b.ok());
    if (!b->has_value()) break;
    ASSERT_LT(k, want.size());
    ExpectSame(**b, want[k++]);
    (*p)->Recycle(std::move(**b));
  }
  EXPECT_EQ(k, want.size());
}

TEST(PipelineTest, EarlyDestructionDoesNotHang) {
  SyntheticOptions so;
  so.shape = {32, 32, 3};
  so.num_examples = 1000000;
  auto ds = MakeSynthetic(so);
  ASSERT_TRUE(ds.ok());
  std::shared_ptr<const Dataset> shared = std::move(ds).value();
  PipelineOptions po;
  po.end_epoch = 100;
  const auto t0 = Clock::now();
  for (int consumed : {0, 1, 5}) {
    auto p = Pipeline::Create(shared, Options(64, 0), v1::TransformSpec(), true, po);
    ASSERT_TRUE(p.ok());
    for (int i = 0; i < consumed; ++i) {
      auto b = (*p)->Next();
      ASSERT_TRUE(b.ok() && b->has_value());
      EXPECT_EQ((*b)->n, 64);
    }
    // Give the producer time to fill the queue and block on it.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 30.0);
}

TEST(PipelineTest, EvaluationOrderWithoutShuffle) {
  auto ds = Small();
  SamplerOptions so = Options(50, 9);
  so.shuffle = false;
  auto p = Pipeline::Create(ds, so, Augmenting(), /*train=*/false, PipelineOptions());
  ASSERT_TRUE(p.ok());
  std::vector<Batch> got = Drain(**p);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].n, 3);
  EXPECT_EQ(got[2].indices, (std::vector<int64_t>{100, 101, 102}));
  // No augmentation: example 100 is (7*100 + j) % 256 normalised.
  for (int j = 0; j < 32; ++j) {
    const float v = static_cast<float>((700 + j) % 256);
    EXPECT_NEAR(got[2].x[j], (v / 255 - 0.5f) / 0.25f, 1e-5);
  }
}

// Labels only: each batch's indices, labels and sizes as a full pipeline
// yields them, on every rank and over epochs, resumed or not; no inputs.
TEST(PipelineTest, LabelsOnlyYieldsTheFullBatchesLabelsAndNoInputs) {
  auto ds = Small();
  for (int rank : {0, 2}) {
    PipelineOptions po;
    po.rank = rank;
    po.world_size = 3;
    po.start_step = 2;
    po.end_epoch = 3;
    auto full = Pipeline::Create(ds, Options(12, 4), Augmenting(), true, po);
    po.labels_only = true;
    auto labels = Pipeline::Create(ds, Options(12, 4), Augmenting(), true, po);
    ASSERT_TRUE(full.ok() && labels.ok());
    const std::vector<Batch> want = Drain(**full), got = Drain(**labels);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_GT(want.size(), 20u);
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(got[k].epoch, want[k].epoch);
      EXPECT_EQ(got[k].step, want[k].step);
      EXPECT_EQ(got[k].n, want[k].n);
      EXPECT_EQ(got[k].global_n, want[k].global_n);
      EXPECT_EQ(got[k].last_in_epoch, want[k].last_in_epoch);
      EXPECT_EQ(got[k].indices, want[k].indices);
      EXPECT_EQ(got[k].y, want[k].y);
      EXPECT_TRUE(got[k].x.empty()) << "batch " << k;
      EXPECT_FALSE(want[k].x.empty());
    }
  }
}

TEST(PipelineTest, BadOptions) {
  auto ds = Small();
  PipelineOptions po;
  po.prefetch = 0;
  EXPECT_EQ(Pipeline::Create(ds, Options(4, 0), {}, true, po).status().code(),
            absl::StatusCode::kInvalidArgument);
  po = {};
  po.rank = 2;
  po.world_size = 2;
  EXPECT_EQ(Pipeline::Create(ds, Options(4, 0), {}, true, po).status().code(),
            absl::StatusCode::kInvalidArgument);
  po = {};
  EXPECT_EQ(Pipeline::Create(ds, Options(0, 0), {}, true, po).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::TransformSpec bad;
  bad.add_mean(1);
  bad.add_mean(2);
  bad.add_mean(3);
  EXPECT_THAT(std::string(Pipeline::Create(ds, Options(4, 0), bad, true, po).status().message()),
              ::testing::HasSubstr("data.transform.mean"));
}

}  // namespace
}  // namespace yoke::data
