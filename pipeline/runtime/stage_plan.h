// StagePlan: which layers each stage of a pipeline job holds.
//
// The model's expanded layer list (engine::Model::PipelineCuts) may be cut
// only where no residual join reaches across. Between two legal cuts lies a
// segment that no stage boundary can split. A plan either follows the
// spec's distribution.pipeline.boundaries (the first layer of each later
// stage, by name), or balances the stages' forward multiply-accumulates
// over the segments (BalancedSplit; each layer also counts 1, so layers
// without arithmetic still weigh something).
//
// Thread-safety: pure functions.
#ifndef YOKE_PIPELINE_RUNTIME_STAGE_PLAN_H_
#define YOKE_PIPELINE_RUNTIME_STAGE_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model.h"

namespace yoke::pipeline {

struct StagePlan {
  // Stage s holds layers [starts[s], starts[s + 1]) (the last to `layers`).
  std::vector<int> starts;
  int layers = 0;
  // Per stage: forward multiply-accumulates and activations it sends on
  // (values per example; 0 for the last stage).
  std::vector<int64_t> macs, sends;

  int begin(int stage) const { return starts[stage]; }
  int end(int stage) const {
    return stage + 1 < static_cast<int>(starts.size()) ? starts[stage + 1] : layers;
  }
};

// The plan for `stages` stages. `boundaries` empty: balanced; else the
// names of the first layers of stages 1.., each a legal cut, in model
// order. INVALID_ARGUMENT naming `path` (the spec field) when a name is not
// a layer of the model, is not where the model may be cut (naming the
// legal cuts near it), or the names are out of order; or when the model
// has fewer segments than stages.
absl::StatusOr<StagePlan> PlanStages(const engine::Model::Cuts& cuts, int stages,
                                     const std::vector<std::string>& boundaries,
                                     const std::string& path);

}  // namespace yoke::pipeline

#endif  // YOKE_PIPELINE_RUNTIME_STAGE_PLAN_H_
