// Model: batch norm applied again in backward (training.recompute_batch_norm;
// engine/model.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/model.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {

absl::StatusOr<int> Model::SetRecomputeBatchNorm(bool on) {
  if (on && !device_.is_cpu()) {
    return absl::FailedPreconditionError(
        absl::StrCat("training.recompute_batch_norm runs on the CPU engine only; this model is on ",
                     device_.ToString()));
  }
  if (on && activation_sets() > 1) {
    return absl::FailedPreconditionError(
        "training.recompute_batch_norm keeps one forward's statistics; it cannot run with several "
        "micro-batches in flight (a pipeline stage)");
  }
  if (on && recompute_) {
    return absl::FailedPreconditionError(
        "training.recompute_batch_norm: not with training.recompute, which computes these "
        "outputs again already");
  }
  batch_ = -1;  // the buffers are laid out again at the next training Forward
  reapply_ = on;
  PlanReapply();
  return static_cast<int>(
      std::count_if(reapply_slot_.begin(), reapply_slot_.end(), [](int s) { return s >= 0; }));
}

void Model::PlanReapply() {
  const int n = static_cast<int>(nodes_.size());
  reapply_owner_.assign(n, -1);
  reapply_slot_.assign(n, -1);
  reapply_lives_.clear();
  reapply_plan_ = BufferPlan();
  reapply_slots_.clear();
  reapply_holder_.clear();
  if (!reapply_ || recompute_ || !memory_plan_on_ || !device_.is_cpu() || n == 0) return;
  const std::vector<int> owner = BufferOwners();
  // Per buffer: the last node whose Forward reads it, and whether a join
  // writes its sum over it (then it is the join's output, and kept).
  std::vector<int> last_read(n, -1);
  std::vector<bool> joined(n, false);
  for (int j = 0; j < n; ++j) {
    const Node& node = nodes_[j];
    if (TakesInputBuffer(node)) joined[node.overwrites] = true;
    if (node.fused || node.absorbed) continue;  // it does not run
    for (int src : node.inputs) {
      if (src >= 0 && owner[src] >= 0) last_read[owner[src]] = std::max(last_read[owner[src]], j);
    }
  }
  std::vector<int> members;
  for (int i = 0; i < n; ++i) {
    const Node& node = nodes_[i];
    // The logits' buffer outlives the Forward; a buffer nothing reads later
    // would gain nothing.
    if (!node.layer->CheapToRecompute() || owner[i] != i || joined[i] || owner[n - 1] == i ||
        last_read[i] < 0) {
      continue;
    }
    // Its Forward runs again from kept inputs only.
    bool kept_inputs = true;
    for (int src : node.inputs) {
      if (src >= 0 && (owner[src] < 0 || reapply_slot_[owner[src]] >= 0)) kept_inputs = false;
    }
    if (!kept_inputs) continue;
    reapply_slot_[i] = static_cast<int>(members.size());  // its index in lives, for now
    members.push_back(i);
    reapply_lives_.push_back({NumElements(node.shape), i, last_read[i]});
  }
  if (members.empty()) return;
  reapply_plan_ = PlanBuffers(reapply_lives_);
  for (size_t k = 0; k < members.size(); ++k) reapply_slot_[members[k]] = reapply_plan_.slot[k];
  for (int i = 0; i < n; ++i) {
    if (owner[i] >= 0 && reapply_slot_[owner[i]] >= 0) reapply_owner_[i] = owner[i];
  }
  reapply_holder_.assign(reapply_plan_.slot_elements.size(), -1);
}

absl::Status Model::ReapplyFor(int i, const LayerContext& ctx) {
  if (reapply_holder_.empty()) return absl::OkStatus();
  const Node& node = nodes_[i];
  auto ensure = [&](int m) -> absl::Status {
    const int k = m < 0 ? -1 : reapply_owner_[m];
    if (k < 0 || reapply_holder_[reapply_slot_[k]] == k) return absl::OkStatus();
    RETURN_IF_ERROR(ForwardAgain(k, &nodes_[k].out, ctx));
    reapply_holder_[reapply_slot_[k]] = k;
    return absl::OkStatus();
  };
  // Two outputs one Backward reads were live together in Forward, so they
  // have different slots: rebuilding one never overwrites the other.
  if (node.layer->BackwardReadsInputs()) {
    for (int src : node.inputs) RETURN_IF_ERROR(ensure(src));
  }
  if (node.layer->BackwardReadsOutput()) {
    RETURN_IF_ERROR(ensure(node.writes_into >= 0 ? node.writes_into : i));
  }
  return absl::OkStatus();
}

}  // namespace yoke::engine
