// Model's memory plans (engine/model.h): the buffers of an evaluation Forward
// and the activation gradients of Backward, each shared by liveness through
// PlanBuffers (engine/memory_plan.h).
#include <algorithm>
#include <climits>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/memory_plan.h"
#include "engine/model.h"

namespace yoke::engine {

std::vector<int> Model::BufferOwners() const {
  const int n = static_cast<int>(nodes_.size());
  std::vector<int> owner(n, -1);
  for (int i = 0; i < n; ++i) {
    const Node& node = nodes_[i];
    if (node.fused) {
      owner[i] = owner[node.inputs[0]];
    } else if (node.writes_into < 0) {
      owner[i] = i;
    }
  }
  return owner;
}

void Model::PlanEvalBuffers() {
  const int n = static_cast<int>(nodes_.size());
  // A producer that writes a pool's output has no buffer of its own, and
  // that pool's buffer is written at the producer's step.
  const std::vector<int> owner = BufferOwners();
  std::vector<int> buffer(n, -1);
  std::vector<BufferLife> lives;
  for (int i = 0; i < n; ++i) {
    if (owner[i] != i) continue;
    buffer[i] = static_cast<int>(lives.size());
    lives.push_back({NumElements(nodes_[i].shape), i, i});
  }
  for (int i = 0; i < n; ++i) {
    const Node& node = nodes_[i];
    if (node.writes_into >= 0) lives[buffer[node.writes_into]].first = i;
    if (node.fused || node.absorbed) continue;  // it does not run
    for (int src : node.inputs) {
      if (src >= 0 && owner[src] >= 0) {
        BufferLife& l = lives[buffer[owner[src]]];
        l.last = std::max(l.last, i);
      }
    }
  }
  // The logits outlive the Forward.
  if (owner[n - 1] >= 0) lives[buffer[owner[n - 1]]].last = n;
  const BufferPlan plan = PlanBuffers(lives);
  eval_lives_ = lives;
  eval_plan_ = plan;
  eval_slot_.assign(n, -1);
  for (int i = 0; i < n; ++i) {
    if (owner[i] >= 0) eval_slot_[i] = plan.slot[buffer[owner[i]]];
  }
  eval_slot_elements_ = plan.slot_elements;
}

bool Model::RunsBackward(int i) const {
  const Node& node = nodes_[i];
  return node.needs_grad && !node.backward_fused && !node.absorbed;
}

bool Model::HasGradBuffer(int i) const {
  const Node& node = nodes_[i];
  // A producer that absorbed a pool reads the pool's gradient instead.
  return (node.needs_grad && !node.backward_fused && node.writes_into < 0) ||
         i == static_cast<int>(nodes_.size()) - 1;
}

void Model::PlanGradBuffers() {
  // Backward runs the nodes in reverse: node j at step n - j; step 0 copies
  // dlogits into the last node's gradient.
  const int n = static_cast<int>(nodes_.size());
  auto step = [n](int j) { return n - j; };
  std::vector<int> buffer(n, -1);
  std::vector<BufferLife> lives;
  for (int i = 0; i < n; ++i) {
    if (!HasGradBuffer(i)) continue;
    buffer[i] = static_cast<int>(lives.size());
    lives.push_back({NumElements(nodes_[i].shape), INT_MAX, -1});
  }
  lives[buffer[n - 1]].first = 0;
  // Who reads a gradient: its node's Backward, or for an absorbed pool, its
  // producer's.
  for (int i = 0; i < n; ++i) {
    const Node& node = nodes_[i];
    if (node.writes_into >= 0 && RunsBackward(i)) {
      lives[buffer[node.writes_into]].last = step(i);
    } else if (buffer[i] >= 0 && RunsBackward(i)) {
      lives[buffer[i]].last = step(i);
    }
  }
  // Who writes one, in Backward's order: the first contribution goes to the
  // buffer, each later one to a scratch buffer of its own step (then added).
  std::vector<int> received(n, 0);
  received[n - 1] = 1;
  std::vector<std::vector<int>> scratch(n);
  for (int j = n - 1; j >= 0; --j) {
    if (!RunsBackward(j)) continue;
    const std::vector<int>& inputs = nodes_[j].inputs;
    scratch[j].assign(inputs.size(), -1);
    for (size_t k = 0; k < inputs.size(); ++k) {
      const int src = GradTarget(inputs[k]);
      if (src < 0 || !nodes_[src].needs_grad || buffer[src] < 0) continue;
      if (received[src]++ == 0) {
        lives[buffer[src]].first = std::min(lives[buffer[src]].first, step(j));
      } else {
        scratch[j][k] = static_cast<int>(lives.size());
        lives.push_back({NumElements(nodes_[src].shape), step(j), step(j)});
      }
    }
  }
  for (BufferLife& l : lives) {
    if (l.first == INT_MAX) l.first = std::max(l.last, 0);  // never written
    if (l.last < l.first) l.last = l.first;                 // never read
  }
  const BufferPlan plan = PlanBuffers(lives);
  grad_lives_ = lives;
  grad_plan_ = plan;
  grad_slot_.assign(n, -1);
  grad_scratch_slot_.assign(n, {});
  for (int i = 0; i < n; ++i) {
    if (buffer[i] >= 0) grad_slot_[i] = plan.slot[buffer[i]];
    for (int b : scratch[i]) grad_scratch_slot_[i].push_back(b < 0 ? -1 : plan.slot[b]);
  }
  grad_slot_elements_ = plan.slot_elements;
}

absl::Status Model::CheckMemoryPlans() const {
  RETURN_IF_ERROR(CheckRecompute());
  RETURN_IF_ERROR(common::Annotate(CheckBufferPlan(eval_lives_, eval_plan_), "evaluation plan"));
  RETURN_IF_ERROR(common::Annotate(CheckBufferPlan(reapply_lives_, reapply_plan_),
                                   "recomputed batch norm plan"));
  return common::Annotate(CheckBufferPlan(grad_lives_, grad_plan_), "gradient plan");
}

int64_t Model::EvalActivationBytes(int64_t n) const {
  int64_t elements = 0;
  for (int64_t e : eval_slot_elements_) elements += e;
  return elements * n * static_cast<int64_t>(sizeof(float));
}

int64_t Model::HeldActivationBytes() const {
  // Outputs that share a buffer (a fused ReLU, a layer writing its max
  // pool's output) count once.
  std::map<const void*, int64_t> buffers;
  auto add = [&buffers](const Tensor& t) {
    if (!t.defined() || t.bytes() == 0) return;
    int64_t& b = buffers[t.raw()];
    b = std::max(b, static_cast<int64_t>(t.bytes()));
  };
  for (const Node& node : nodes_) {
    if (!InPool(node.out)) add(node.out);
  }
  if (pool_.defined()) buffers[pool_.raw()] = static_cast<int64_t>(pool_.bytes());
  for (const Tensor& t : reapply_slots_) add(t);  // its outputs are views from its start
  for (const ActivationSet& set : sets_) {
    for (const Tensor& t : set.outs) add(t);
  }
  int64_t total = 0;
  for (const auto& [ptr, bytes] : buffers) total += bytes;
  return total;
}

int64_t Model::ActivationBytes(int64_t n) const {
  // With recomputation: the kept outputs, and the pool.
  int64_t elements = recompute_ ? pool_elements_ : 0;
  for (int64_t e : reapply_plan_.slot_elements) elements += e;  // recompute_batch_norm
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (!node.fused && node.writes_into < 0 && node.pool_offset < 0 && !TakesInputBuffer(node) &&
        !Reapplied(i)) {
      elements += NumElements(node.shape);
    }
  }
  return elements * n * static_cast<int64_t>(sizeof(float));
}

std::vector<Model::LayerBytes> Model::ActivationBreakdown(int64_t n) const {
  std::vector<LayerBytes> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    const bool own =
        !node.fused && node.writes_into < 0 && !TakesInputBuffer(node) && !Reapplied(i);
    out.push_back({node.layer->name(), TypeLabel(node),
                   own ? NumElements(node.shape) * n * static_cast<int64_t>(sizeof(float)) : 0});
  }
  return out;
}

int64_t Model::GradientBytes(int64_t n, bool planned) const {
  int64_t elements = 0;
  if (planned) {
    for (int64_t e : grad_slot_elements_) elements += e;
  } else {
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      if (HasGradBuffer(i)) elements += NumElements(nodes_[i].shape);
    }
  }
  return elements * n * static_cast<int64_t>(sizeof(float));
}

absl::Status Model::EnsureGradBuffers() {
  auto shape_of = [&](int i) {
    Shape s = nodes_[i].shape;
    s.insert(s.begin(), batch_);
    return s;
  };
  const int n = static_cast<int>(nodes_.size());
  grad_batch_ = -1;  // until every buffer has the new size
  if (input_grad_on_) RETURN_IF_ERROR(EnsureInputGrad());
  if (!memory_plan_on_) {
    for (int i = 0; i < n; ++i) {
      if (!HasGradBuffer(i)) continue;
      ASSIGN_OR_RETURN(nodes_[i].grad, Tensor::Allocate(shape_of(i), DType::kF32, device_,
                                                        absl::StrCat("the gradient of layer ",
                                                                     nodes_[i].layer->name())));
    }
    grad_batch_ = batch_;
    return absl::OkStatus();
  }
  // The slots grow to the largest batch and are viewed at the current one
  // (activation sets of several sizes share them).
  if (grad_slots_.empty() || batch_ > grad_capacity_) {
    grad_slots_.clear();
    for (Node& node : nodes_) {
      node.grad = Tensor();
      node.grad_scratch.clear();
    }
    for (size_t s = 0; s < grad_slot_elements_.size(); ++s) {
      ASSIGN_OR_RETURN(
          Tensor t, Tensor::Allocate(
                        {grad_slot_elements_[s] * batch_}, DType::kF32, device_,
                        absl::StrCat("gradient buffer ", s, " of ", grad_slot_elements_.size())));
      grad_slots_.push_back(std::move(t));
    }
    grad_capacity_ = batch_;
  }
  for (int i = 0; i < n; ++i) {
    Node& node = nodes_[i];
    if (grad_slot_[i] >= 0) node.grad = grad_slots_[grad_slot_[i]].View(0, shape_of(i));
    node.grad_scratch.assign(node.inputs.size(), Tensor());
    for (size_t k = 0; k < grad_scratch_slot_[i].size(); ++k) {
      const int slot = grad_scratch_slot_[i][k];
      if (slot < 0) continue;
      const int src = GradTarget(node.inputs[k]);
      if (src < 0) continue;  // the input's own scratch (EnsureInputGrad)
      node.grad_scratch[k] = grad_slots_[slot].View(0, shape_of(src));
    }
  }
  grad_batch_ = batch_;
  return absl::OkStatus();
}

absl::Status Model::EnsureInputGrad() {
  Shape s = input_shape_;
  s.insert(s.begin(), batch_);
  const int64_t per_example = NumElements(input_shape_);
  // A second reader of the input sends its gradient to scratch first.
  int readers = 0;
  for (const Node& node : nodes_) {
    for (int src : node.inputs) readers += src < 0 && node.needs_grad ? 1 : 0;
  }
  if (input_grad_capacity_ < batch_) {
    input_grad_ = input_grad_scratch_ = Tensor();
    input_grad_store_ = input_grad_scratch_store_ = Tensor();
    ASSIGN_OR_RETURN(input_grad_store_,
                     Tensor::Allocate({per_example * batch_}, DType::kF32, device_,
                                      "the gradient of the stage's input"));
    if (readers > 1) {
      ASSIGN_OR_RETURN(input_grad_scratch_store_,
                       Tensor::Allocate({per_example * batch_}, DType::kF32, device_,
                                        "the scratch gradient of the stage's input"));
    }
    input_grad_capacity_ = batch_;
  }
  input_grad_ = input_grad_store_.View(0, s);
  if (input_grad_scratch_store_.defined())
    input_grad_scratch_ = input_grad_scratch_store_.View(0, s);
  return absl::OkStatus();
}

absl::Status Model::EnsureEvalBuffers(int64_t n) {
  if (n == eval_batch_) return absl::OkStatus();
  eval_batch_ = -1;  // until every view has the new size
  if (n > eval_capacity_ || eval_slots_.size() != eval_slot_elements_.size()) {
    eval_out_.clear();  // the old slots go first: no view keeps them
    eval_slots_.clear();
    eval_capacity_ = 0;
    for (size_t s = 0; s < eval_slot_elements_.size(); ++s) {
      ASSIGN_OR_RETURN(
          Tensor t, Tensor::Allocate(
                        {eval_slot_elements_[s] * n}, DType::kF32, device_,
                        absl::StrCat("evaluation buffer ", s, " of ", eval_slot_elements_.size())));
      eval_slots_.push_back(std::move(t));
    }
    eval_capacity_ = n;
  }
  eval_out_.assign(nodes_.size(), Tensor());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (eval_slot_[i] < 0) continue;
    Shape s = nodes_[i].shape;
    s.insert(s.begin(), n);
    eval_out_[i] = eval_slots_[eval_slot_[i]].View(0, s);
  }
  eval_batch_ = n;
  return absl::OkStatus();
}

}  // namespace yoke::engine
