// Sampler: which examples each rank reads at each step of each epoch.
//
// Epoch e visits the dataset in the order of a permutation that is a pure
// function of (seed, e): a Fisher-Yates shuffle driven by Philox with the
// epoch as the stream id, or the identity when shuffling is off (evaluation).
// No state carries over between epochs, so a job resumed at (epoch, step)
// sees exactly the examples an uninterrupted run would have.
//
// Sharding. The global batch B is the unit of a step: step s covers the
// permutation positions [s*B, min((s+1)*B, size)). That window is split into
// `world` contiguous slices whose sizes differ by at most one, and rank r
// takes slice r. The ranks' slices are therefore disjoint and together cover
// each epoch exactly once. The final partial batch is kept, not dropped:
// steps_per_epoch = ceil(size / B), and in the last step a rank's slice may
// be smaller (or, when fewer examples than ranks remain, empty). The trainer
// averages gradients over StepSize(step) to stay exact.
//
// Thread-safety: all methods are const and thread-safe. The permutation of
// the most recent epoch is cached (under a mutex) so that each step costs
// O(B), not O(size).
#ifndef YOKE_DATA_SAMPLER_H_
#define YOKE_DATA_SAMPLER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace yoke::data {

struct SamplerOptions {
  // Global batch size (all ranks together); > 0.
  int64_t batch_size = 0;
  // Seeds the per-epoch permutations (TrainingSpec.seed).
  uint64_t seed = 0;
  // false: every epoch visits 0, 1, 2, ... in order (for evaluation).
  bool shuffle = true;
};

class Sampler {
 public:
  // INVALID_ARGUMENT if dataset_size <= 0 or batch_size <= 0.
  static absl::StatusOr<std::unique_ptr<Sampler>> Create(int64_t dataset_size,
                                                         const SamplerOptions& options);

  int64_t dataset_size() const { return size_; }
  const SamplerOptions& options() const { return options_; }
  // ceil(dataset_size / batch_size).
  int64_t steps_per_epoch() const { return steps_; }
  // Examples in step `step` over all ranks: batch_size, except possibly in
  // the last step. 0 for a step outside [0, steps_per_epoch()).
  int64_t StepSize(int64_t step) const;

  // The order of epoch `epoch` (>= 0): a permutation of [0, dataset_size).
  std::vector<int64_t> Permutation(int64_t epoch) const;

  // Dataset indices that rank `rank` of `world` reads at (epoch, step), in
  // permutation order. Empty if step is outside [0, steps_per_epoch()) or
  // rank is outside [0, world).
  std::vector<int64_t> Indices(int64_t epoch, int64_t step, int rank, int world) const;

  // Where rank `rank`'s slice of step `step` starts within the epoch's
  // permutation, and how long it is.
  struct Slice {
    int64_t begin = 0;
    int64_t count = 0;
  };
  Slice RankSlice(int64_t step, int rank, int world) const;

 private:
  Sampler(int64_t size, const SamplerOptions& options);
  std::shared_ptr<const std::vector<int64_t>> CachedPermutation(int64_t epoch) const;

  const int64_t size_;
  const SamplerOptions options_;
  const int64_t steps_;

  mutable absl::Mutex mu_;
  mutable int64_t cached_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  mutable std::shared_ptr<const std::vector<int64_t>> cached_ ABSL_GUARDED_BY(mu_);
};

}  // namespace yoke::data

#endif  // YOKE_DATA_SAMPLER_H_
