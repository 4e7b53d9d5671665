#include "pipeline/split.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace yoke::pipeline {
namespace {

// Cuts at the largest stages of cost <= `limit` from the left, but leaves at
// least one layer for each stage still to come; empty when the last stage
// would pass the limit.
std::vector<int> GreedyStarts(const std::vector<int64_t>& costs, int stages, int64_t limit) {
  const int n = static_cast<int>(costs.size());
  std::vector<int> starts = {0};
  int64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    const int stages_left = stages - static_cast<int>(starts.size());
    const bool must_cut = stages_left > 0 && n - i == stages_left;
    if (i > starts.back() && (sum + costs[i] > limit || must_cut)) {
      if (stages_left == 0) return {};
      starts.push_back(i);
      sum = 0;
    }
    sum += costs[i];
  }
  if (sum > limit || static_cast<int>(starts.size()) != stages) return {};
  return starts;
}

}  // namespace

absl::StatusOr<std::vector<int>> BalancedSplit(const std::vector<int64_t>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  if (stages < 1)
    return absl::InvalidArgumentError(absl::StrCat("stages: must be >= 1, got ", stages));
  if (n < stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", n, " layers into ", stages, " stages: each needs a layer"));
  }
  int64_t lo = 0, hi = 0;
  for (int i = 0; i < n; ++i) {
    if (costs[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, ": negative cost ", costs[i]));
    }
    lo = std::max(lo, costs[i]);
    hi += costs[i];
  }
  // The smallest limit a split meets: greedy cutting decides each limit.
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (GreedyStarts(costs, stages, mid).empty()) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return GreedyStarts(costs, stages, lo);
}

absl::Status CheckBoundaries(const std::vector<int>& boundaries, int layers) {
  int previous = 0;
  for (size_t i = 0; i < boundaries.size(); ++i) {
    const int b = boundaries[i];
    if (b <= previous || b >= layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline.boundaries[", i, "]: ", b, " must be after ", previous,
                       " and before the model's ", layers, " layers (each stage needs a layer)"));
    }
    previous = b;
  }
  return absl::OkStatus();
}

int64_t LargestStageCost(const std::vector<int64_t>& costs, const std::vector<int>& starts) {
  int64_t largest = 0;
  for (size_t s = 0; s < starts.size(); ++s) {
    const int end = s + 1 < starts.size() ? starts[s + 1] : static_cast<int>(costs.size());
    int64_t sum = 0;
    for (int i = starts[s]; i < end; ++i) sum += costs[i];
    largest = std::max(largest, sum);
  }
  return largest;
}

absl::StatusOr<std::vector<int>> MicroBatchSizes(int batch, int micro_batches) {
  if (batch < 1 || micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a step needs samples and micro-batches, got ",
                                                   batch, " and ", micro_batches));
  }
  const int m = std::min(batch, micro_batches);
  std::vector<int> sizes(m, batch / m);
  for (int i = 0; i < batch % m; ++i) ++sizes[i];
  return sizes;
}

}  // namespace yoke::pipeline
