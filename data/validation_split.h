// Validation split: holds out a fixed fraction of a training set
// (DataSpec.validation_split), for any dataset format.
//
// Which examples are held out is a pure function of (size, fraction, seed):
// a Fisher-Yates permutation of [0, size) driven by Philox with its own key
// (so it is independent of the per-epoch shuffles drawn from the same
// seed); its first floor(fraction * size) entries are the validation set.
// The split is therefore the same in every epoch, on every rank and after a
// restart, and no example is in both parts.
//
// Thread-safety: the functions are pure; a Subset is as thread-safe as its
// base (see dataset.h).
#ifndef YOKE_DATA_VALIDATION_SPLIT_H_
#define YOKE_DATA_VALIDATION_SPLIT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace yoke::data {

struct SplitIndices {
  std::vector<int64_t> train;       // ascending
  std::vector<int64_t> validation;  // ascending
};

// Splits [0, size) as described above. INVALID_ARGUMENT naming
// data.validation_split if fraction is outside (0, 1) or if either part
// would be empty (too few examples for the fraction).
absl::StatusOr<SplitIndices> SplitForValidation(int64_t size, double fraction, uint64_t seed);

// The examples `indices` of `base`, in that order (each in [0, base->size()),
// and not empty). num_classes() and class_names() stay the base's.
std::unique_ptr<Dataset> Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);

}  // namespace yoke::data

#endif  // YOKE_DATA_VALIDATION_SPLIT_H_
