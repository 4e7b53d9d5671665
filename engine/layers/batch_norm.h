// batch_norm: normalisation over the channel (last) dimension.
//
// x: (N, ..., C) -> y: (N, ..., C), typically (N, H, W, C) or (N, C).
// Training: y = gamma * (x - mean_B) / sqrt(var_B + eps) + beta with the
// batch's statistics over every position but C, and the running statistics
// move as PyTorch's do: running = (1 - momentum) * running + momentum * batch,
// where the running variance takes the unbiased batch variance.
// Eval: the running statistics stand in for the batch's.
//
// Synchronized (ctx.sync_stats set, training only): the statistics are those
// of the union of every replica's batch, as if one replica had seen all the
// samples. Forward sums per-channel sums over the replicas, then the centred
// squares (two small allreduces; two passes keep the variance free of the
// cancellation in E[x^2] - E[x]^2), and normalises with them. Backward sums
// (sum dy, sum dy * xhat) over the replicas so that dx carries the other
// replicas' share of d(mean)/dx and d(var)/dx:
//   dx = gamma * invstd / M * (M * dy - sum_all(dy) - xhat * sum_all(dy * xhat))
// with M the total row count. dgamma and dbeta stay this replica's share;
// the gradient reducer sums them like any other parameter gradient.
//
// Parameters: gamma (C), init 1; beta (C), init 0. State (checkpointed, never
// reduced): running_mean (C), init 0; running_var (C), init 1.
#ifndef YOKE_ENGINE_LAYERS_BATCH_NORM_H_
#define YOKE_ENGINE_LAYERS_BATCH_NORM_H_

#include <map>
#include <memory>
#include <vector>

#include "engine/kernels/cpu/batch_norm.h"
#include "engine/layer.h"

namespace yoke::engine {

class BatchNormLayer final : public Layer {
 public:
  // Values must already be valid (the registered factory checks the spec).
  BatchNormLayer(float momentum, float epsilon) : momentum_(momentum), epsilon_(epsilon) {}
  const char* type() const override { return "batch_norm"; }
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  // x: (N, ..., C) -> y: (N, ..., C); in training also updates the running stats.
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  // dy: (N, ..., C) -> dgamma, dbeta (C) and dx (N, ..., C) when din[0] is set.
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;
  // Backward reads the input and the saved statistics, never `out`: a ReLU
  // after batch norm is applied to the output in place (training, and
  // evaluation alike).
  bool FuseRelu() override {
    relu_ = true;
    return true;
  }
  bool BackwardReadsOutput() const override { return false; }
  // A Forward with LayerContext::recompute computes the batch's statistics
  // again (the same kernel on the same input: the same bits), or reuses a
  // synchronized Forward's, and leaves the running statistics alone.
  bool CheapToRecompute() const override { return true; }

 private:
  struct Cached {
    std::unique_ptr<cpu::BatchNormPlan> plan;
    Tensor scratch_dx;  // dx nobody reads (oneDNN always writes one)
  };
  absl::StatusOr<Cached*> PlanFor(int64_t n, const LayerContext& ctx);
  // The synchronized paths (see the header comment). x, y, dy, dx: (M, C).
  absl::Status ForwardSynced(const Tensor& x, Cached* c, CrossReplicaSum* sum, float* y);
  absl::Status BackwardSynced(const Tensor& x, const Tensor& dy, CrossReplicaSum* sum, float* dx);

  // Forward without the fused ReLU.
  absl::Status Normalize(const Tensor& x, Tensor* out, const LayerContext& ctx);
  // Applies the fused ReLU to y in place (nothing without one).
  void ApplyRelu(Tensor* y) const;

  float momentum_, epsilon_;
  bool relu_ = false;
  int64_t channels_ = 0, per_example_ = 0;
  int gamma_ = -1, beta_ = -1, mean_ = -1, var_ = -1;
  std::map<int64_t, Cached> plans_;  // by StateKey (batch size, activation set)
  // The last synchronized Forward's global statistics, for its Backward:
  // mean and biased variance (C), and the total row count over all replicas.
  std::vector<float> sync_mean_, sync_var_;
  double sync_rows_ = 0;
  std::vector<float> sync_buf_;  // staging for the cross-replica sums
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_BATCH_NORM_H_
