// Model: activation recomputation (training.recompute; engine/model.h).
#include <algorithm>
#include <chrono>
#include <climits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/model.h"

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
  // The buffers are laid out again at the next training Forward.
  batch_ = -1;
  pool_ = Tensor();
  resident_segment_ = -1;
  recompute_ = on;
  PlanRecompute();
  if (!on) return 0;
  int recomputed = 0;
  for (size_t k = 0; k < segment_runs_.size(); ++k) {
    bool pooled = false;
    for (const Node& node : nodes_)
      pooled |= node.segment == static_cast<int>(k) && node.pool_offset >= 0;
    recomputed += pooled && segment_runs_[k] ? 1 : 0;
  }
  return recomputed;
}

void Model::PlanRecompute() {
  const int n = static_cast<int>(nodes_.size());
  for (Node& node : nodes_) {
    node.pool_offset = -1;
    node.segment = 0;
    node.last_of_segment = -1;
  }
  pool_elements_ = 0;
  segment_runs_.assign(1, false);
  if (!recompute_ || n == 0) return;
  // A segment starts at every b where no layer from b on reads anything
  // before layer b - 1 (the model input included): PipelineCuts' rule.
  std::vector<int> min_input(n + 1, INT_MAX);
  for (int j = n - 1; j >= 0; --j) {
    min_input[j] = min_input[j + 1];
    for (int src : nodes_[j].inputs) min_input[j] = std::min(min_input[j], src);
  }
  int segment = 0;
  for (int b = 0; b < n; ++b) {
    if (b > 0 && min_input[b] >= b - 1) {
      nodes_[b - 1].last_of_segment = segment;
      ++segment;
    }
    nodes_[b].segment = segment;
  }
  nodes_[n - 1].last_of_segment = segment;
  segment_runs_.assign(segment + 1, false);
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
    segment_runs_[node.segment] = segment_runs_[node.segment] || RunsBackward(i);
    if (owner[i] != i || i == kept) continue;
    node.pool_offset = offset;
    offset += NumElements(node.shape);
    pool_elements_ = std::max(pool_elements_, offset);
  }
}

bool Model::InPool(const Tensor& t) const {
  if (!pool_.defined() || !t.defined()) return false;
  const char* p = static_cast<const char*>(t.raw());
  const char* base = static_cast<const char*>(pool_.raw());
  return p >= base && p < base + pool_.bytes();
}

absl::Status Model::RecomputeSegment(int k, const LayerContext& ctx) {
  LayerContext again = ctx;
  again.recompute = true;
  std::vector<const Tensor*> in;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    Node& node = nodes_[i];
    if (node.segment != k || node.fused || node.absorbed) continue;
    Node& target = node.writes_into >= 0 ? nodes_[node.writes_into] : node;
    if (target.pool_offset < 0) continue;  // a kept output
    in.clear();
    for (int src : node.inputs) in.push_back(src < 0 ? &input_ : &nodes_[src].out);
    const auto t0 =
        profiling_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    RETURN_IF_ERROR(
        common::Annotate(node.layer->Forward(in, &target.out, again), node.layer->name()));
    if (profiling_) {
      node.forward_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
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
