// Model: activation recomputation (training.recompute; engine/model.h).
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/model.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {

absl::StatusOr<int> Model::SetRecompute(bool on) {
  if (on && !device_.is_cpu()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "training.recompute runs on the CPU engine only; this model is on ", device_.ToString()));
  }
  if (on && activation_sets() > 1) {
    return absl::FailedPreconditionError(
        "training.recompute keeps one forward's activations; it cannot run with several "
        "micro-batches in flight (a pipeline stage)");
  }
  if (on && reapply_) {
    return absl::FailedPreconditionError(
        "training.recompute: not with training.recompute_batch_norm, which it covers");
  }
  // The buffers are laid out again at the next training Forward.
  batch_ = -1;
  pool_ = Tensor();
  resident_segment_ = -1;
  recompute_ = on;
  PlanRecompute();
  if (!on) return 0;
  return static_cast<int>(std::count(recomputed_.begin(), recomputed_.end(), true));
}

void Model::PlanRecompute() {
  const int n = static_cast<int>(nodes_.size());
  for (Node& node : nodes_) {
    node.pool_offset = -1;
    node.segment = 0;
    node.last_of_segment = -1;
  }
  pool_elements_ = 0;
  recomputed_.assign(1, false);
  if (!recompute_ || n == 0) return;
  // A segment starts at every cut point (the model input counts as read).
  std::vector<std::vector<int>> inputs;
  for (const Node& node : nodes_) inputs.push_back(node.inputs);
  const std::vector<int> cuts = shapes::CutPoints(inputs);
  int segment = 0;
  size_t next_cut = 0;
  for (int b = 0; b < n; ++b) {
    if (next_cut < cuts.size() && cuts[next_cut] == b) {
      nodes_[b - 1].last_of_segment = segment;
      ++segment;
      ++next_cut;
    }
    nodes_[b].segment = segment;
  }
  nodes_[n - 1].last_of_segment = segment;
  // A segment is recomputed when it has pooled outputs and a node of it
  // runs backward.
  std::vector<bool> runs(segment + 1, false), pooled(segment + 1, false);
  // Each node's buffer: its own, its producer's (a fused ReLU), or none (a
  // layer writing its pool's output). The buffer of a segment's last node
  // is kept; every other buffer of a segment goes to the pool, after the
  // segment's earlier ones.
  const std::vector<int> owner = BufferOwners();
  int64_t offset = 0;
  int kept = -1;
  for (int i = 0; i < n; ++i) {
    Node& node = nodes_[i];
    if (i == 0 || nodes_[i - 1].last_of_segment >= 0) {
      offset = 0;
      int last = i;
      while (nodes_[last].last_of_segment < 0) ++last;
      kept = owner[last];
    }
    runs[node.segment] = runs[node.segment] || RunsBackward(i);
    if (owner[i] != i || i == kept) continue;
    pooled[node.segment] = true;
    node.pool_offset = offset;
    offset += NumElements(node.shape);
    pool_elements_ = std::max(pool_elements_, offset);
  }
  recomputed_.assign(segment + 1, false);
  for (int k = 0; k <= segment; ++k) recomputed_[k] = runs[k] && pooled[k];
}

bool Model::InPool(const Tensor& t) const {
  if (!pool_.defined() || !t.defined()) return false;
  const char* p = static_cast<const char*>(t.raw());
  const char* base = static_cast<const char*>(pool_.raw());
  return p >= base && p < base + pool_.bytes();
}

absl::Status Model::ForwardAgain(int i, Tensor* out, const LayerContext& ctx) {
  Node& node = nodes_[i];
  LayerContext again = ctx;
  again.recompute = true;
  std::vector<const Tensor*> in;
  for (int src : node.inputs) in.push_back(src < 0 ? &input_ : &nodes_[src].out);
  const auto t0 =
      profiling_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  RETURN_IF_ERROR(common::Annotate(node.layer->Forward(in, out, again), node.layer->name()));
  if (profiling_) {
    node.forward_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return absl::OkStatus();
}

absl::Status Model::RecomputeSegment(int k, const LayerContext& ctx) {
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    Node& node = nodes_[i];
    if (node.segment != k || node.fused || node.absorbed) continue;
    Node& target = node.writes_into >= 0 ? nodes_[node.writes_into] : node;
    if (target.pool_offset < 0) continue;  // a kept output
    RETURN_IF_ERROR(ForwardAgain(i, &target.out, ctx));
  }
  resident_segment_ = k;
  return absl::OkStatus();
}

absl::Status Model::CheckRecompute() const {
  if (!recompute_) return absl::OkStatus();
  const int n = static_cast<int>(nodes_.size());
  const std::vector<int> owner = BufferOwners();
  for (int j = 0; j < n; ++j) {
    for (int src : nodes_[j].inputs) {
      if (src < 0 || owner[src] < 0) continue;
      const Node& h = nodes_[owner[src]];
      if (h.pool_offset >= 0 && h.segment != nodes_[j].segment) {
        return absl::InternalError(absl::StrCat("recompute plan: layer ", nodes_[j].layer->name(),
                                                " (segment ", nodes_[j].segment, ") reads ",
                                                nodes_[src].layer->name(),
                                                ", whose output is pooled in segment ", h.segment));
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    const Node& a = nodes_[i];
    if (a.pool_offset < 0) continue;
    if (a.pool_offset + NumElements(a.shape) > pool_elements_) {
      return absl::InternalError(
          absl::StrCat("recompute plan: ", a.layer->name(), " runs past the pool"));
    }
    for (int j = i + 1; j < n; ++j) {
      const Node& b = nodes_[j];
      if (b.pool_offset < 0 || b.segment != a.segment) continue;
      if (a.pool_offset < b.pool_offset + NumElements(b.shape) &&
          b.pool_offset < a.pool_offset + NumElements(a.shape)) {
        return absl::InternalError(absl::StrCat("recompute plan: ", a.layer->name(), " and ",
                                                b.layer->name(), " overlap in the pool"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace yoke::engine
