#include "data/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace yoke::data {
namespace {

std::unique_ptr<Sampler> Make(int64_t size, int64_t batch, uint64_t seed = 0, bool shuffle = true) {
  SamplerOptions o;
  o.batch_size = batch;
  o.seed = seed;
  o.shuffle = shuffle;
  auto s = Sampler::Create(size, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

TEST(SamplerTest, PermutationIsAPermutation) {
  for (int64_t n : {1, 2, 17, 60000}) {
    auto s = Make(n, 7, 99);
    std::vector<int64_t> p = s->Permutation(3);
    ASSERT_EQ(static_cast<int64_t>(p.size()), n);
    std::sort(p.begin(), p.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(p[i], i);
  }
}

TEST(SamplerTest, PureFunctionOfSeedAndEpoch) {
  auto a = Make(1000, 10, 7), b = Make(1000, 10, 7), c = Make(1000, 10, 8);
  EXPECT_EQ(a->Permutation(0), b->Permutation(0));
  EXPECT_EQ(a->Permutation(5), b->Permutation(5));
  // Asking in another order gives the same answers (no hidden state).
  std::vector<int64_t> late = b->Indices(5, 3, 0, 1);
  EXPECT_EQ(a->Indices(0, 3, 0, 1), b->Indices(0, 3, 0, 1));
  EXPECT_EQ(a->Indices(5, 3, 0, 1), late);
  EXPECT_NE(a->Permutation(0), a->Permutation(1));
  EXPECT_NE(a->Permutation(0), c->Permutation(0));
  // Not the identity.
  std::vector<int64_t> id(1000);
  std::iota(id.begin(), id.end(), 0);
  EXPECT_NE(a->Permutation(0), id);
}

// A correct Fisher-Yates makes all 24 orders of 4 items equally likely; the
// classic off-by-one (drawing j from [0, n) every time) does not.
TEST(SamplerTest, ShuffleIsUniform) {
  auto s = Make(4, 4, 1234);
  std::map<std::vector<int64_t>, int> counts;
  const int epochs = 48000;
  for (int e = 0; e < epochs; ++e) counts[s->Permutation(e)]++;
  ASSERT_EQ(counts.size(), 24u);
  double chi2 = 0;
  const double expect = epochs / 24.0;
  for (auto& [perm, n] : counts) chi2 += (n - expect) * (n - expect) / expect;
  // 23 degrees of freedom: p = 1e-4 at about 55.
  EXPECT_LT(chi2, 55) << "chi-square " << chi2;
}

TEST(SamplerTest, NoShuffleIsIdentity) {
  auto s = Make(10, 4, 5, /*shuffle=*/false);
  EXPECT_EQ(s->Indices(3, 0, 0, 1), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(s->Indices(0, 2, 0, 1), (std::vector<int64_t>{8, 9}));
}

TEST(SamplerTest, SplitsStepsAcrossRanksByHand) {
  auto s = Make(10, 4, 0, /*shuffle=*/false);
  EXPECT_EQ(s->steps_per_epoch(), 3);
  EXPECT_EQ(s->StepSize(0), 4);
  EXPECT_EQ(s->StepSize(2), 2);
  EXPECT_EQ(s->StepSize(3), 0);
  // 4 examples over 3 ranks: 2, 1, 1.
  EXPECT_EQ(s->Indices(0, 0, 0, 3), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(s->Indices(0, 0, 1, 3), (std::vector<int64_t>{2}));
  EXPECT_EQ(s->Indices(0, 0, 2, 3), (std::vector<int64_t>{3}));
  // Last step has 2 examples over 3 ranks: 1, 1, 0.
  EXPECT_EQ(s->Indices(0, 2, 0, 3), (std::vector<int64_t>{8}));
  EXPECT_EQ(s->Indices(0, 2, 1, 3), (std::vector<int64_t>{9}));
  EXPECT_TRUE(s->Indices(0, 2, 2, 3).empty());
  // Out of range.
  EXPECT_TRUE(s->Indices(0, 3, 0, 1).empty());
  EXPECT_TRUE(s->Indices(0, 0, 3, 3).empty());
}

TEST(SamplerTest, RanksAreDisjointAndCoverEachEpoch) {
  for (int world : {1, 2, 3, 4, 7}) {
    auto s = Make(103, 10, 11);
    EXPECT_EQ(s->steps_per_epoch(), 11);
    for (int64_t epoch : {0, 1}) {
      const std::vector<int64_t> perm = s->Permutation(epoch);
      std::vector<int64_t> seen;
      for (int64_t step = 0; step < s->steps_per_epoch(); ++step) {
        int64_t lo = INT64_MAX, hi = 0, total = 0;
        for (int r = 0; r < world; ++r) {
          std::vector<int64_t> idx = s->Indices(epoch, step, r, world);
          lo = std::min<int64_t>(lo, idx.size());
          hi = std::max<int64_t>(hi, idx.size());
          total += idx.size();
          seen.insert(seen.end(), idx.begin(), idx.end());
        }
        EXPECT_LE(hi - lo, 1) << "world " << world << " step " << step;
        EXPECT_EQ(total, step == 10 ? 3 : 10);
      }
      // Rank-major within each step, steps in order: exactly the permutation.
      EXPECT_EQ(seen, perm) << "world " << world;
    }
  }
}

TEST(SamplerTest, BadOptions) {
  SamplerOptions o;
  o.batch_size = 0;
  EXPECT_EQ(Sampler::Create(10, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.batch_size = 4;
  EXPECT_EQ(Sampler::Create(0, o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoke::data
