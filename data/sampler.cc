#include "data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rng.h"

namespace yoke::data {

namespace {

// Keeps the shuffle's Philox key apart from other users of the same job seed
// (augmentation, dropout), so their streams never coincide.
constexpr uint64_t kShuffleKey = 0x53485546464C4531ull;  // "SHUFFLE1"

}  // namespace

absl::StatusOr<std::unique_ptr<Sampler>> Sampler::Create(int64_t dataset_size,
                                                         const SamplerOptions& options) {
  if (dataset_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: dataset is empty (size ", dataset_size, ")"));
  }
  if (options.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: batch_size must be > 0, got ", options.batch_size));
  }
  return std::unique_ptr<Sampler>(new Sampler(dataset_size, options));
}

Sampler::Sampler(int64_t size, const SamplerOptions& options)
    : size_(size),
      options_(options),
      steps_((size + options.batch_size - 1) / options.batch_size) {}

int64_t Sampler::StepSize(int64_t step) const {
  if (step < 0 || step >= steps_) return 0;
  return std::min(options_.batch_size, size_ - step * options_.batch_size);
}

std::vector<int64_t> Sampler::Permutation(int64_t epoch) const {
  std::vector<int64_t> p(size_);
  std::iota(p.begin(), p.end(), int64_t{0});
  if (!options_.shuffle) return p;
  common::Philox rng(options_.seed ^ kShuffleKey, static_cast<uint64_t>(epoch));
  for (int64_t i = size_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

Sampler::Slice Sampler::RankSlice(int64_t step, int rank, int world) const {
  Slice s;
  if (world <= 0 || rank < 0 || rank >= world) return s;
  const int64_t len = StepSize(step);
  const int64_t base = len / world, extra = len % world;
  s.begin = step * options_.batch_size + rank * base + std::min<int64_t>(rank, extra);
  s.count = base + (rank < extra ? 1 : 0);
  return s;
}

std::shared_ptr<const std::vector<int64_t>> Sampler::CachedPermutation(int64_t epoch) const {
  {
    absl::MutexLock lock(&mu_);
    if (cached_epoch_ == epoch) return cached_;
  }
  // Shuffle outside the lock; two threads racing on a new epoch both compute
  // the same permutation, which is harmless.
  auto p = std::make_shared<const std::vector<int64_t>>(Permutation(epoch));
  absl::MutexLock lock(&mu_);
  cached_epoch_ = epoch;
  cached_ = p;
  return p;
}

std::vector<int64_t> Sampler::Indices(int64_t epoch, int64_t step, int rank, int world) const {
  const Slice s = RankSlice(step, rank, world);
  if (s.count == 0) return {};
  if (!options_.shuffle) {
    std::vector<int64_t> out(s.count);
    std::iota(out.begin(), out.end(), s.begin);
    return out;
  }
  std::shared_ptr<const std::vector<int64_t>> p = CachedPermutation(epoch);
  return std::vector<int64_t>(p->begin() + s.begin, p->begin() + s.begin + s.count);
}

}  // namespace yoke::data
