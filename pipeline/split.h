// How a pipeline divides its work: the model's layers into stages, and a
// step's batch into micro-batches.
//
// Thread-safety: pure functions.
#ifndef YOKE_PIPELINE_SPLIT_H_
#define YOKE_PIPELINE_SPLIT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace yoke::pipeline {

// The first layer of each of `stages` stages, for layers of the given costs
// (each >= 0, e.g. an estimate of a layer's time or memory): contiguous,
// every stage holds at least one layer, and the costliest stage costs as
// little as any split can make it. Starts are {0, ...}, increasing.
// INVALID_ARGUMENT when stages < 1, a cost is negative, or there are fewer
// layers than stages.
absl::StatusOr<std::vector<int>> BalancedSplit(const std::vector<int64_t>& costs, int stages);

// A split given in the spec, as the first layer of each stage after the
// first (so p-1 boundaries for p stages): INVALID_ARGUMENT naming the
// boundary unless they increase strictly within (0, layers).
absl::Status CheckBoundaries(const std::vector<int>& boundaries, int layers);

// The costliest stage of a split (starts as BalancedSplit returns them).
int64_t LargestStageCost(const std::vector<int64_t>& costs, const std::vector<int>& starts);

// A step of `batch` samples in at most `micro_batches` micro-batches: their
// sizes, which differ by at most one, larger first. A batch smaller than
// micro_batches (an epoch's short last step) gives `batch` micro-batches of
// one; none is ever empty. INVALID_ARGUMENT unless both are >= 1.
absl::StatusOr<std::vector<int>> MicroBatchSizes(int batch, int micro_batches);

}  // namespace yoke::pipeline

#endif  // YOKE_PIPELINE_SPLIT_H_
