// Layer: one node of a model graph, with a hand-written Forward and Backward.
//
// Life cycle:
//   1. A factory (registered under the LayerSpec field name, see registry.h)
//      creates the layer from its LayerSpec and checks the spec's values.
//   2. Build() sees the per-example input shapes (no batch dimension), checks
//      them, declares parameters in the model's ParamSet and returns the
//      per-example output shape.
//   3. Forward()/Backward() run once per step, in that order, on tensors that
//      carry the batch dimension first. A layer may keep what Forward computed
//      (masks, saved statistics) for the Backward of the same step.
//
// Gradient contract: Backward OVERWRITES each of its parameter gradients in the
// ParamSet (every parameter belongs to exactly one layer, used once), and
// overwrites din[i] for every non-null din[i]. A null din[i] means that input's
// gradient is not needed (the model input), and a layer should skip the work.
//
// Layout: images are channels-last, (N, H, W, C).
//
// Thread-safety: one Layer instance belongs to one replica; not thread-safe.
#ifndef YOKE_ENGINE_LAYER_H_
#define YOKE_ENGINE_LAYER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/param_set.h"
#include "engine/tensor.h"

namespace yoke::engine {

// Sums small buffers over every replica of a data-parallel step, in place,
// and returns once every replica's contribution is in (synchronized batch
// norm). The engine knows nothing of communicators: the trainer implements
// this on top of its replica's one. Every replica must call it the same
// number of times, in the same order, with the same counts.
class CrossReplicaSum {
 public:
  virtual ~CrossReplicaSum() = default;
  // data: (count) -> the elementwise sum over all replicas. `what` names the
  // call in errors ("bn1/gamma forward sums"). Fails with the collective's
  // status (a timeout names the ranks that never arrived).
  virtual absl::Status SumInPlace(float* data, int64_t count, const std::string& what) = 0;
};

// Per-step information a layer may need.
struct LayerContext {
  bool training = true;  // dropout and batch-norm behave differently in eval
  uint64_t seed = 0;     // job seed
  int64_t step = 0;      // global step, for counter-based RNG (dropout)
  int replica = 0;       // global rank of this replica (distinct dropout masks)
  // Set in training when batch_norm must normalise over every replica's
  // samples (distribution.sync_batch_norm); null: each replica's own batch.
  CrossReplicaSum* sync_stats = nullptr;
  // Which in-flight forward this is, in [0, kMaxActivationSets). A pipeline
  // stage runs the forwards of several micro-batches before their backwards
  // (Model::SetActivationSets); whatever a layer keeps from Forward for
  // Backward (masks, batch statistics, pooling indices) it keeps per set,
  // and a Backward uses the set of its own Forward. 0 everywhere else.
  int activation_set = 0;
  // A Forward run again in backward to rebuild activations that were not
  // kept (Model::SetRecompute): the same arithmetic, but batch norm leaves
  // its running statistics alone, having updated them in the first Forward.
  bool recompute = false;
};

// The most activation sets a model keeps (micro-batches in flight on one
// pipeline stage).
inline constexpr int kMaxActivationSets = 4096;

// A key for state a layer keeps per batch size and activation set.
inline int64_t StateKey(int64_t n, const LayerContext& ctx) {
  return n * kMaxActivationSets + ctx.activation_set;
}

class Layer {
 public:
  virtual ~Layer() = default;

  // The registry name ("dense", "conv2d", ...).
  virtual const char* type() const = 0;

  // Set by the model before Build(); used to name parameters "<name>/<param>".
  void set_name(const std::string& name) { name_ = name; }
  const std::string& name() const { return name_; }
  // Position of this layer in the model (seeds per-layer RNG streams).
  void set_index(int index) { index_ = index; }
  int index() const { return index_; }

  // Checks the per-example input shapes and declares parameters in `params`.
  // Returns the per-example output shape, or INVALID_ARGUMENT naming the
  // mismatch ("expects 1 input of rank 3 (H, W, C), got (784)").
  virtual absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) = 0;

  // out = f(in). `out` is allocated by the caller with shape (N, output...).
  virtual absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                               const LayerContext& ctx) = 0;

  // Given dout = dL/dout, overwrites parameter gradients and each non-null
  // din[i] = dL/din[i]. `in` and `out` are those of the preceding Forward.
  virtual absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                const Tensor& dout, const std::vector<Tensor*>& din,
                                const LayerContext& ctx) = 0;

  // Multiply-accumulate count per example of Forward (for reporting FLOPs).
  virtual int64_t ForwardMacsPerExample() const { return 0; }

  // Operator fusion, asked by the model before the first Forward when this
  // layer's only consumer is a ReLU. A layer that can apply the ReLU as it
  // writes its output (in the kernel, saving a pass over the activation)
  // starts doing so and returns true; the model then runs the ReLU's
  // Backward alone. Only layers whose Backward never reads `out` may accept:
  // `out` then holds the activation, not the layer's own result.
  virtual bool FuseRelu() { return false; }

  // The other half, asked when this layer is the only consumer of a ReLU's
  // output: a layer that can fold the ReLU's backward into its own returns
  // true; from then on its din[0] is the gradient of the ReLU's input, and it
  // must pass gradient only where its input `in[0]` (the ReLU's output) is
  // positive. The model then skips the ReLU's backward.
  virtual bool FuseReluBackward() { return false; }

  // True for a max pool of 2x2 windows, stride 2 and no padding: the one
  // pool a producer may absorb (below).
  virtual bool IsTiledMaxPool2x2() const { return false; }

  // Asked when this layer applies a ReLU (FuseRelu) that feeds only such a
  // max pool, and this layer's input needs no gradient. A layer that can
  // pool its own activation in registers returns true; from then on Forward
  // writes the pool's output (its `out` is the pool's), Backward receives the
  // pool's output and gradient as `out` and `dout`, and its din[0] is null.
  // The model then runs neither the ReLU nor the pool.
  virtual bool AbsorbMaxPool2x2() { return false; }

  // Mixed precision (training.precision: bf16), set by the model before the
  // first Forward or between steps. A layer that can compute in bf16
  // (reading its input, weights and output gradient rounded to bf16 and
  // summing their products in fp32) starts doing so when `on`, and returns
  // true; `on` false goes back to fp32. The tensors between layers, the
  // parameters, their gradients and the optimizer stay fp32 either way.
  virtual bool UseBf16(bool on) { return false; }

  // Whether Backward reads `out` (a ReLU's mask, a sigmoid's value). A layer
  // whose Backward never does says false, and the model may then let its
  // only consumer write over its output (MayOverwriteInput).
  virtual bool BackwardReadsOutput() const { return true; }

  // True for a layer whose Forward is exact with `out` sharing the buffer of
  // one of its inputs, and whose Backward reads none of its inputs: the
  // model then lets it write over an input whose value nothing else needs
  // (a residual join writing its sum over batch norm's output).
  virtual bool MayOverwriteInput() const { return false; }

  // Whether Backward reads the values of its inputs (a convolution's, for
  // its weight gradient). A residual join's reads only the output gradient.
  virtual bool BackwardReadsInputs() const { return true; }

  // True for a layer whose training Forward, run again on the same inputs
  // with LayerContext::recompute, writes the same output to the bit, changes
  // no state and costs about a pass over its input and output (batch norm:
  // its statistics again, then the normalisation and its fused ReLU). The
  // model may then keep no copy of the output and run Forward again in
  // backward (Model::SetRecomputeBatchNorm).
  virtual bool CheapToRecompute() const { return false; }

 protected:
  ParamSet* params_ = nullptr;  // set by Build() implementations that need it

 private:
  std::string name_;
  int index_ = 0;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYER_H_
