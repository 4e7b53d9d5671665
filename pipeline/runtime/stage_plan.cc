#include "pipeline/runtime/stage_plan.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "pipeline/split.h"

namespace yoke::pipeline {

namespace {

// Up to `limit` legal cuts nearest layer `at`, as "index (name)".
std::string NearCuts(const engine::Model::Cuts& cuts, int at, size_t limit) {
  std::vector<int> near = cuts.cuts;
  std::stable_sort(near.begin(), near.end(),
                   [at](int a, int b) { return std::abs(a - at) < std::abs(b - at); });
  if (near.size() > limit) near.resize(limit);
  std::sort(near.begin(), near.end());
  std::vector<std::string> out;
  for (int b : near) out.push_back(absl::StrCat(cuts.names[b], " (layer ", b, ")"));
  return absl::StrJoin(out, ", ");
}

absl::StatusOr<std::vector<int>> NamedStarts(const engine::Model::Cuts& cuts, int stages,
                                             const std::vector<std::string>& boundaries,
                                             const std::string& path) {
  if (static_cast<int>(boundaries.size()) != stages - 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", stages - 1, " names for ", stages,
                                                   " stages, got ", boundaries.size()));
  }
  std::vector<int> starts{0};
  for (size_t i = 0; i < boundaries.size(); ++i) {
    const auto it = std::find(cuts.names.begin(), cuts.names.end(), boundaries[i]);
    if (it == cuts.names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, "[", i, "]: the model has no layer '", boundaries[i], "'"));
    }
    const int b = static_cast<int>(it - cuts.names.begin());
    if (!std::binary_search(cuts.cuts.begin(), cuts.cuts.end(), b)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, "[", i, "]: the model cannot be cut before '", boundaries[i], "' (layer ", b,
          "): a residual join reaches across; legal stage starts near it: ",
          cuts.cuts.empty() ? std::string("none") : NearCuts(cuts, b, 4)));
    }
    if (b <= starts.back()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, "[", i, "]: '", boundaries[i], "' (layer ", b,
          ") must come after the previous stage's first layer (layer ", starts.back(), ")"));
    }
    starts.push_back(b);
  }
  return starts;
}

absl::StatusOr<std::vector<int>> BalancedStarts(const engine::Model::Cuts& cuts, int stages,
                                                const std::string& path) {
  std::vector<int> seg_start{0};
  seg_start.insert(seg_start.end(), cuts.cuts.begin(), cuts.cuts.end());
  if (static_cast<int>(seg_start.size()) < stages) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the model can be cut into at most ", seg_start.size(), " stages (it has ",
        cuts.cuts.size(), " legal cuts between its ", cuts.layers, " layers), not ", stages));
  }
  std::vector<int64_t> cost;
  for (size_t k = 0; k < seg_start.size(); ++k) {
    const int end = k + 1 < seg_start.size() ? seg_start[k + 1] : cuts.layers;
    int64_t c = 0;
    for (int l = seg_start[k]; l < end; ++l) c += cuts.macs[l] + 1;
    cost.push_back(c);
  }
  ASSIGN_OR_RETURN(const std::vector<int> seg, BalancedSplit(cost, stages));
  std::vector<int> starts;
  for (int k : seg) starts.push_back(seg_start[k]);
  return starts;
}

}  // namespace

absl::StatusOr<StagePlan> PlanStages(const engine::Model::Cuts& cuts, int stages,
                                     const std::vector<std::string>& boundaries,
                                     const std::string& path) {
  if (stages < 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": stages must be >= 1, got ", stages));
  }
  StagePlan plan;
  plan.layers = cuts.layers;
  if (boundaries.empty()) {
    ASSIGN_OR_RETURN(plan.starts, BalancedStarts(cuts, stages, path));
  } else {
    ASSIGN_OR_RETURN(plan.starts, NamedStarts(cuts, stages, boundaries, path));
  }
  for (int s = 0; s < stages; ++s) {
    int64_t macs = 0;
    for (int l = plan.begin(s); l < plan.end(s); ++l) macs += cuts.macs[l];
    plan.macs.push_back(macs);
    plan.sends.push_back(s + 1 < stages ? cuts.output_elements[plan.end(s) - 1] : 0);
  }
  return plan;
}

}  // namespace yoke::pipeline
