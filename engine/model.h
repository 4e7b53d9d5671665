// Model: a graph of layers built from a ModelSpec.
//
// Nodes are kept in spec order, which must be topological: a layer may only
// read "input" or layers listed before it. Forward runs the nodes in order;
// Backward runs them in reverse and sums the gradients of a node whose output
// feeds several others (residual joins). Each node owns its output and
// gradient tensors, reused from step to step while the batch size is
// unchanged, so the steady-state step allocates nothing.
//
// Memory plans (engine/memory_plan.h, engine/model_memory.cc), computed once
// per model:
//   * Evaluation (a Forward with ctx.training false) keeps nothing for a
//     backward pass, so it runs on its own buffers, shared by liveness: an
//     activation's memory is reused once its last reader has run. Its peak
//     is EvalActivationBytes(n), a few of the largest activations instead of
//     all of them, and it leaves the training buffers alone, so alternating
//     training and evaluation at two batch sizes allocates nothing after the
//     first of each.
//   * Backward shares the activation gradients the same way: a node's
//     gradient lives from its first contribution to its own backward, and
//     the second and later contributions of a residual join go to planned
//     scratch buffers, so a step allocates nothing.
//   * A training Forward lets a residual join write its sum over an input
//     that feeds only the join and that no Backward reads (batch norm's
//     output before the join): ShareJoinBuffers.
// YOKE_MEMORY_PLAN=0 in the environment turns them off (a buffer per layer,
// for comparison).
//
// All parameters live in one ParamSet (flat buffers; see param_set.h).
//
// Thread-safety: one Model is one replica; not thread-safe.
#ifndef YOKE_ENGINE_MODEL_H_
#define YOKE_ENGINE_MODEL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/device_backend.h"
#include "engine/layer.h"
#include "engine/memory_plan.h"
#include "engine/param_set.h"
#include "engine/shapes/layer_shapes.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::engine {

class Model {
 public:
  // Builds the model for per-example input `input_shape` (H, W, C) and
  // `num_classes` outputs. A zoo spec is expanded first (engine/zoo/model_zoo.h). Errors
  // are INVALID_ARGUMENT with the field path, e.g.
  // "model.layers[3] (conv2d_3): expects 1 input of rank 3 ...".
  static absl::StatusOr<std::unique_ptr<Model>> Create(const v1::ModelSpec& spec,
                                                       const Shape& input_shape, int num_classes,
                                                       Device device = Device::CPU());

  // A stage of a pipeline: layers [begin, end) of the model Create would
  // build (the zoo expanded). Its input is layer begin - 1's output (the
  // model input when begin is 0), its output layer end - 1's, and Backward
  // also computes its input's gradient (input_grad()) when begin > 0. Layer
  // indices and parameter initialisation are the whole model's, so the
  // stages of a split start from the values Create's model would and run
  // the same dropout masks. Each interior cut must be one of
  // PipelineCuts(): INVALID_ARGUMENT naming the layers that reach across it.
  static absl::StatusOr<std::unique_ptr<Model>> CreateStage(const v1::ModelSpec& spec,
                                                            const Shape& input_shape,
                                                            int num_classes, int begin, int end,
                                                            Device device = Device::CPU());

  // Where the model may be cut into pipeline stages.
  struct Cuts {
    int layers = 0;                  // of the expanded list
    std::vector<std::string> names;  // per layer
    // Every b in [1, layers) such that layer b - 1's output is the only
    // tensor that layers b and later read from before b (no residual join
    // reaches across, and nothing reads the model input): increasing.
    std::vector<int> cuts;
    // Per layer: forward multiply-accumulates and output values per example
    // (the costs a split balances).
    std::vector<int64_t> macs, output_elements;
    int64_t parameters = 0;  // of the whole model
  };
  static absl::StatusOr<Cuts> PipelineCuts(const v1::ModelSpec& spec, const Shape& input_shape,
                                           int num_classes);

  // Keeps k forwards' activations at once (1 <= k <= kMaxActivationSets):
  // ctx.activation_set picks the set a training Forward fills and the
  // Backward that follows it reads, so a pipeline stage can run several
  // micro-batches' forwards before their backwards. Sets may hold different
  // batch sizes; the gradient buffers are shared and grow to the largest.
  // Fewer sets drop the extra ones. UNIMPLEMENTED above 1 on a device (its
  // layers keep one Forward's state), INVALID_ARGUMENT out of range.
  absl::Status SetActivationSets(int k);
  int activation_sets() const { return sets_.empty() ? 1 : static_cast<int>(sets_.size()); }
  // The bytes of the distinct layer-output buffers the model holds now, in
  // every activation set: what keeping micro-batches in flight costs, as
  // allocated (a pipeline stage reports its peak).
  int64_t HeldActivationBytes() const;
  // After Backward on a stage with begin > 0: dL/d(input), (N, input...).
  // Undefined on a model whose input needs no gradient. Valid until the next
  // Backward.
  const Tensor& input_grad() const { return input_grad_; }

  ParamSet& params() { return params_; }
  const ParamSet& params() const { return params_; }

  // x: (N, input_shape...) -> logits (N, K). The returned tensor stays valid
  // until the next Forward.
  absl::StatusOr<Tensor> Forward(const Tensor& x, const LayerContext& ctx);

  // The activation memory an evaluation Forward of `n` examples needs under
  // the liveness plan, and what a training Forward keeps: a buffer per layer,
  // or with recomputation (SetRecompute) the kept outputs and the pool.
  int64_t EvalActivationBytes(int64_t n) const;
  int64_t ActivationBytes(int64_t n) const;
  // Per layer, in order: the bytes its output takes in a training step of
  // `n` examples; 0 for an output in another layer's buffer (a ReLU its
  // convolution applies, a convolution writing its max pool's output).
  struct LayerBytes {
    std::string name, type;
    int64_t bytes = 0;
  };
  std::vector<LayerBytes> ActivationBreakdown(int64_t n) const;
  // The activation gradients' memory for a training step of `n` examples,
  // under the liveness plan or with a buffer per layer.
  int64_t GradientBytes(int64_t n, bool planned) const;
  // Both plans checked by CheckBufferPlan (engine/memory_plan.h).
  absl::Status CheckMemoryPlans() const;

  // Called during Backward with a parameter id (ParamSet entry index, i.e.
  // declaration order) as soon as that parameter's gradient is final: right
  // after its layer's Backward. The data-parallel trainer starts reducing
  // gradient buckets from here, while backward carries on.
  using GradReadyFn = std::function<void(int param_id)>;

  // Backpropagates dlogits (N, K) through the last Forward, which must have
  // run in training mode (else FAILED_PRECONDITION); overwrites every
  // parameter gradient. `on_grad_ready`, if set, is called once per
  // parameter, in the order the gradients become final (layers in reverse
  // order; a layer's parameters in declaration order).
  absl::Status Backward(const Tensor& dlogits, const LayerContext& ctx,
                        const GradReadyFn& on_grad_ready = nullptr);

  const Shape& input_shape() const { return input_shape_; }
  // Where the parameters, activations and gradients live; Forward's input
  // and Backward's dlogits must be on it too.
  Device device() const { return device_; }
  const Shape& output_shape() const { return nodes_.back().shape; }
  int64_t ForwardMacsPerExample() const;

  // Activation recomputation (training.recompute). The model is split into
  // segments at the points where it could be cut into pipeline stages (the
  // outputs between residual blocks, PipelineCuts); a training Forward keeps
  // only each segment's last output, and the rest of a segment's outputs
  // live in one pool that the segments share, sized to the largest. Backward
  // runs each segment's Forward again (LayerContext::recompute: batch norm
  // does not update its running statistics twice) before its backward. The
  // results are the same to the bit; the cost is about one more Forward per
  // step. FAILED_PRECONDITION on a device model or with several activation
  // sets. Returns the number of segments whose outputs are recomputed.
  absl::StatusOr<int> SetRecompute(bool on);
  bool recompute() const { return recompute_; }

  // Batch norm applied again in backward (training.recompute_batch_norm): a
  // training Forward writes the output of each layer that can cheaply run
  // its Forward again to the same bits (Layer::CheapToRecompute: batch norm
  // and the ReLU it applies) into a slot shared by outputs whose forward
  // lifetimes do not overlap (PlanBuffers), and Backward runs that layer's
  // Forward again (LayerContext::recompute) before a backward that reads the
  // output finds another output in its slot. Only outputs that own their
  // buffer, feed a later layer and read only kept outputs take part; with
  // the memory plan on. The results are the same to the bit. FAILED_
  // PRECONDITION on a device model, with several activation sets or with
  // training.recompute (which recomputes these outputs already). Returns how
  // many outputs are recomputed.
  absl::StatusOr<int> SetRecomputeBatchNorm(bool on);
  bool recompute_batch_norm() const { return reapply_; }

  // Mixed precision on the CPU (training.precision: bf16): every layer that
  // can (the convolutions, Layer::UseBf16) computes in bf16 with fp32 sums,
  // or all in fp32 again with `on` false. Returns how many layers compute in
  // bf16. FAILED_PRECONDITION on a device model (the CUDA engine's precision
  // is its own), or when this CPU has neither AVX-512 BF16 nor AMX (oneDNN
  // would emulate bf16, slower than fp32), naming the CPU's ISA.
  absl::StatusOr<int> UseBf16(bool on);
  bool bf16() const { return bf16_; }

  // One line per layer: name, type, output shape, parameter count.
  std::string Summary() const;

  // Per-layer wall time, summed over every Forward and Backward since
  // profiling was switched on (bench/cnn_step_bench's step breakdown). Off by
  // default; on, it costs two clock reads per layer and pass. Switching it on
  // resets the sums.
  struct LayerTime {
    std::string name, type;
    double forward_s = 0, backward_s = 0;
  };
  void set_profiling(bool on);
  std::vector<LayerTime> layer_times() const;

 private:
  struct Node {
    std::unique_ptr<Layer> layer;
    std::vector<int> inputs;  // node indices; -1 is the model input
    Shape shape;              // per example
    Tensor out, grad;         // (N, shape...)
    // Per input: where a second or later gradient contribution goes before
    // it is added (planned; empty without the plan or when not needed).
    std::vector<Tensor> grad_scratch;
    int consumers = 0;
    int grads_received = 0;
    // True when this node's output gradient matters: the node has parameters
    // or reads a node that needs one. Layers between the input and the first
    // parameterised layer (flatten, the first conv's input) skip dL/dx.
    bool needs_grad = false;
    // The node's parameters: ParamSet entry ids [param_begin, param_end).
    int param_begin = 0, param_end = 0;
    // A ReLU whose producer applies it (Layer::FuseRelu): Forward skips the
    // node and `out` shares the producer's buffer; Backward runs as usual.
    bool fused = false;
    // A ReLU whose only consumer folds the ReLU's backward into its own
    // (Layer::FuseReluBackward): Backward skips the node, which needs no
    // gradient buffer, and the consumer writes the ReLU input's gradient.
    bool backward_fused = false;
    // A layer that writes a later max pool's output (Layer::AbsorbMaxPool2x2):
    // the pool's index, else -1. Its own output buffer is never allocated,
    // and its Backward gets the pool's output and gradient.
    int writes_into = -1;
    // A max pool whose producer computes it (see writes_into): Forward and
    // Backward skip the node; its gradient buffer is the producer's dout.
    bool absorbed = false;
    // A residual join (Layer::MayOverwriteInput) that writes its output over
    // the buffer of its input node `overwrites` (else -1): that node feeds
    // only the join and no Backward reads its output, so its value is dead
    // once the join has read it. A training Forward without recomputation
    // then allocates no buffer for the join (TakesInputBuffer).
    int overwrites = -1;
    double forward_s = 0, backward_s = 0;  // with profiling_
    // Recomputation: where this node's own output lives in the pool
    // (elements per example; -1: a buffer of its own, kept), its segment,
    // and for a segment's last node, that segment (else -1).
    int64_t pool_offset = -1;
    int segment = 0;
    int last_of_segment = -1;
  };
  // Per node: the node whose buffer holds its output (-1: none). A fused
  // ReLU's output is its producer's buffer; a producer that writes its max
  // pool's output has none (the pool's holds it).
  std::vector<int> BufferOwners() const;
  // Plans the segments and the pool (SetRecompute).
  void PlanRecompute();
  // Runs node i's Forward again into `out` (LayerContext::recompute), from
  // its inputs' current outputs, timed with the node's Forward.
  absl::Status ForwardAgain(int i, Tensor* out, const LayerContext& ctx);
  // Runs segment k's pooled outputs' Forwards again.
  absl::Status RecomputeSegment(int k, const LayerContext& ctx);
  // Every input a node reads from the pool is in its own segment, and no
  // two pooled outputs of a segment overlap. INTERNAL naming the node.
  absl::Status CheckRecompute() const;
  // Plans the recomputed outputs' slots (SetRecomputeBatchNorm).
  void PlanReapply();
  // Before node i's Backward: runs again the Forward of any recomputed
  // output it reads whose slot holds another output now.
  absl::Status ReapplyFor(int i, const LayerContext& ctx);
  // Whether node i's training output lives in a recomputed outputs' slot.
  bool Reapplied(size_t i) const { return i < reapply_slot_.size() && reapply_slot_[i] >= 0; }
  bool InPool(const Tensor& t) const;

  // Lets each ReLU's producer apply it (Layer::FuseRelu) and its consumer
  // run its backward (Layer::FuseReluBackward), then lets a producer absorb
  // the 2x2 max pool after its ReLU (Layer::AbsorbMaxPool2x2). Off when the
  // environment sets YOKE_FUSE=0, to compare against the unfused graph.
  void FuseActivations();
  // Marks each join that may write over an input (Node::overwrites); with
  // the memory plan on and on the CPU only.
  void ShareJoinBuffers();
  // Whether a node's training output is its input's buffer (Node::overwrites
  // in force: not while recomputing, which plans its own pool).
  bool TakesInputBuffer(const Node& node) const;
  // The node whose gradient a consumer of node `src` writes: `src`, or the
  // input of `src` when `src` is a ReLU whose backward that consumer runs.
  int GradTarget(int src) const;
  // The type with its fusion: "relu (fused)" (both passes), "(fused fwd)",
  // "(fused bwd)"; "conv2d (+pool)" for a producer that absorbed a pool.
  static std::string TypeLabel(const Node& n);

  // The layer list a spec stands for, resolved.
  struct ExpandedLayers {
    std::vector<v1::LayerSpec> layers;
    std::string path;  // "model.layers" or "model.zoo(<name>).layers"
    shapes::LayerPlan plan;
  };
  static absl::StatusOr<ExpandedLayers> Expand(const v1::ModelSpec& spec, const Shape& input_shape,
                                               int num_classes);
  // Builds layers [begin, end) (a legal stage; the whole list for Create).
  static absl::StatusOr<std::unique_ptr<Model>> Build(const ExpandedLayers& e,
                                                      const Shape& input_shape, int begin, int end,
                                                      Device device);
  // Layer i of `e` built alone (a CPU layer, its parameters declared into
  // `params`, which is never finalized): for its costs and parameter count.
  static absl::StatusOr<std::unique_ptr<Layer>> BuildAlone(const ExpandedLayers& e,
                                                           const Shape& input_shape, int i,
                                                           ParamSet* params);
  // Points the parameters' initialisation after the entries of layers
  // [0, begin), which it builds (declaring, not allocating) to count them.
  absl::Status CountEarlierParams(const ExpandedLayers& e, const Shape& input_shape, int begin);
  // Makes activation set s the nodes' current one (Forward and Backward).
  absl::Status SelectSet(int s);
  // Sizes input_grad_ (and its scratch) for batch_.
  absl::Status EnsureInputGrad();

  Model() = default;
  // Sizes every node's output for batch `n`; RESOURCE_EXHAUSTED naming the
  // layer whose buffer does not fit.
  absl::Status EnsureBuffers(int64_t n);
  // Plans the evaluation buffers once, then sizes their slots for `n`
  // examples (growing only) and points eval_out_ into them.
  absl::Status EnsureEvalBuffers(int64_t n);
  void PlanEvalBuffers();
  // Plans the activation gradients once; EnsureGradBuffers sizes them for
  // batch_ at the first Backward after EnsureBuffers.
  void PlanGradBuffers();
  absl::Status EnsureGradBuffers();
  bool RunsBackward(int i) const;   // Backward calls this node's layer
  bool HasGradBuffer(int i) const;  // this node's output has a gradient buffer

  Shape input_shape_;
  Device device_;
  DeviceBackend* backend_ = nullptr;  // null on the CPU
  std::vector<Node> nodes_;
  ParamSet params_;
  Tensor input_;  // the last Forward's input
  int64_t batch_ = -1;
  bool last_forward_eval_ = false;
  bool memory_plan_on_ = true;  // YOKE_MEMORY_PLAN=0 turns it off
  // The evaluation plan: per node, its output's slot (-1: it has none, or
  // writes another node's), the slots' per-example sizes, the slots sized
  // for eval_capacity_ examples, and per node its output at eval_batch_.
  std::vector<int> eval_slot_;
  std::vector<int64_t> eval_slot_elements_;
  std::vector<Tensor> eval_slots_, eval_out_;
  int64_t eval_capacity_ = 0, eval_batch_ = -1;
  // The gradient plan: per node, its gradient's slot and its inputs'
  // scratch slots (-1: none), the slots' per-example sizes, and the slots.
  std::vector<int> grad_slot_;
  std::vector<std::vector<int>> grad_scratch_slot_;
  std::vector<int64_t> grad_slot_elements_;
  std::vector<Tensor> grad_slots_;
  // The lifetimes each plan was made from, and the plans, for
  // CheckMemoryPlans.
  std::vector<BufferLife> eval_lives_, grad_lives_;
  BufferPlan eval_plan_, grad_plan_;
  bool profiling_ = false;
  bool bf16_ = false;
  bool recompute_ = false;
  int64_t pool_elements_ = 0;  // per example: the largest segment's pooled outputs
  Tensor pool_;                // sized for batch_
  int resident_segment_ = -1;  // whose outputs the pool holds now
  // training.recompute_batch_norm: on; per node, the recomputed output whose
  // slot holds its output (itself, or a fused ReLU's producer; -1: kept);
  // per recomputed node, its slot (else -1); the slots' lifetimes and plan
  // (for CheckMemoryPlans); the slots, sized for batch_; and per slot, the
  // node whose output it holds now (-1: none yet).
  bool reapply_ = false;
  std::vector<int> reapply_owner_, reapply_slot_;
  std::vector<BufferLife> reapply_lives_;
  BufferPlan reapply_plan_;
  std::vector<Tensor> reapply_slots_;
  std::vector<int> reapply_holder_;
  // Per segment: backward runs its Forwards again (it has pooled outputs
  // and a node that runs backward).
  std::vector<bool> recomputed_;
  int64_t grad_batch_ = -1;    // the batch the gradient buffers are viewed at
  int64_t grad_capacity_ = 0;  // the batch the planned slots were sized for
  // Activation sets (SetActivationSets): the others' outputs, input, batch
  // and mode while set current_set_ is in the nodes. Empty: one set.
  struct ActivationSet {
    std::vector<Tensor> outs;
    Tensor input;
    int64_t batch = -1;
    bool eval = false;
  };
  std::vector<ActivationSet> sets_;
  int current_set_ = 0;
  // A stage's input gradient (begin > 0): the first contribution, a second
  // reader's scratch, and their storage, sized for input_grad_capacity_.
  bool input_grad_on_ = false;
  Tensor input_grad_, input_grad_scratch_, input_grad_store_, input_grad_scratch_store_;
  int64_t input_grad_capacity_ = 0;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_MODEL_H_
