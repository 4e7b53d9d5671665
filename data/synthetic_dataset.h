// Synthetic dataset: random byte images and labels, generated on demand.
//
// For benchmarks and smoke tests: ResNet-50 on 1M "images" of 224x224x3 needs
// no disk and no 150 GB of memory, because example i is a pure function of
// (seed, i), computed by a counter-based hash whenever it is asked for. The
// same (seed, i) gives the same bytes on every machine and every run.
//
// Values are bytes (0..255), like decoded images, so the usual transform
// (divisor 255, mean/std) applies unchanged.
#ifndef YOKE_DATA_SYNTHETIC_DATASET_H_
#define YOKE_DATA_SYNTHETIC_DATASET_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace yoke::data {

struct SyntheticOptions {
  std::vector<int64_t> shape;  // e.g. (224, 224, 3); every dimension > 0
  int num_classes = 10;        // > 0
  int64_t num_examples = 0;    // > 0
  uint64_t seed = 0;
};

// INVALID_ARGUMENT (naming the option) when an option is out of range.
absl::StatusOr<std::unique_ptr<Dataset>> MakeSynthetic(const SyntheticOptions& options);

}  // namespace yoke::data

#endif  // YOKE_DATA_SYNTHETIC_DATASET_H_
