// yoke::DataLoader and yoke::Batch: the training data of a custom loop, read
// exactly as a job reads it.
//
// A loader opens one split ("train" or "test") of a job spec's `data:`
// section, in any format a job takes (idx, cifar10, csv, image_folder,
// synthetic), applies the section's `transform` (with its augmentation only
// for the train split) and yields batches, prepared on a background thread
// while the caller computes.
//
// Order and sharding are the Trainer's: epoch e visits the examples in a
// permutation that is a pure function of (seed, e) (or in file order with
// shuffle off); options.batch_size is the GLOBAL batch, and rank r of
// world_size reads its contiguous slice of every global batch, so the ranks'
// slices are disjoint and cover each epoch once. The last batch of an epoch
// is kept even when short, and a rank's slice may then be empty
// (Batch::size() == 0): it must still call AllreduceGradients for that step.
//
// Thread-safety: one loader per thread.
#ifndef YOKE_DATA_H_
#define YOKE_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace yoke {

// One rank's share of one step: size() examples of example_shape(), as
// floats, row-major, and their labels. Move-only.
class Batch {
 public:
  Batch();
  ~Batch();
  Batch(Batch&&) noexcept;
  Batch& operator=(Batch&&) noexcept;

  // A batch of your own: `x` holds labels.size() examples of
  // `example_shape`. INVALID_ARGUMENT if the sizes disagree.
  static absl::StatusOr<Batch> FromData(std::vector<int64_t> example_shape,
                                        const std::vector<float>& x, std::vector<int32_t> labels);

  int64_t size() const;         // examples on this rank (0 possible)
  int64_t global_size() const;  // examples of this step on all ranks
  const std::vector<int64_t>& example_shape() const;
  const float* data() const;      // size() * numel(example_shape) floats
  const int32_t* labels() const;  // size() labels
  int64_t epoch() const;
  int64_t step() const;  // within the epoch

  struct Impl;  // not part of the API
  Impl* impl() const { return impl_.get(); }

 private:
  friend class DataLoader;
  std::unique_ptr<Impl> impl_;
};

struct DataLoaderOptions {
  // The GLOBAL batch size: all ranks' slices of a step together; > 0.
  int64_t batch_size = 32;
  // Seeds the per-epoch permutations and the augmentation.
  uint64_t seed = 0;
  // false: every epoch in file order (evaluation).
  bool shuffle = true;
  // This process's rank and the number of ranks (DistributedContext's).
  int rank = 0;
  int world_size = 1;
  // Batches prepared ahead of the caller; >= 1.
  int prefetch = 2;
};

class DataLoader {
 public:
  // `yaml` is a job spec's `data:` section (the rest of the document, if
  // any, is ignored); `split` is "train" or "test". Errors:
  // INVALID_ARGUMENT naming the field (data.train.format: ...) or the
  // option, NOT_FOUND naming a missing file.
  static absl::StatusOr<DataLoader> FromYaml(const std::string& yaml, const std::string& split,
                                             const DataLoaderOptions& options);
  // As FromYaml, reading the YAML from the file at `path`.
  static absl::StatusOr<DataLoader> FromYamlFile(const std::string& path, const std::string& split,
                                                 const DataLoaderOptions& options);

  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;
  ~DataLoader();

  int64_t size() const;             // examples in the split
  int64_t steps_per_epoch() const;  // ceil(size / batch_size)
  const std::vector<int64_t>& example_shape() const;
  int num_classes() const;
  const DataLoaderOptions& options() const;

  // Starts epoch `epoch` (>= 0) from its first step, dropping what is left
  // of the previous one.
  absl::Status StartEpoch(int64_t epoch);
  // Fills `*batch` with the next step's batch and returns true, or returns
  // false at the end of the epoch. The previous contents of `*batch` are
  // reused. FAILED_PRECONDITION before StartEpoch; a read error (an image
  // that cannot be decoded) names the file.
  absl::StatusOr<bool> Next(Batch* batch);

  struct Impl;  // not part of the API

 private:
  explicit DataLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace yoke

#endif  // YOKE_DATA_H_
