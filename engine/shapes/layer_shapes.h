// The shape rules of a model's layer list, without the engine: each layer
// kind's argument rules (what its factory refuses), its output shape for
// given input shapes (what its Build refuses), and the rules of the list as a
// graph (names, inputs, outputs nobody reads, the logits at the end).
//
// One copy of these rules, called from both sides so they cannot drift: the
// engine's layer factories and Build methods and Model::Create (engine/), and
// job validation at submit (jobspec/model_input_check.h), which does not link
// the engine. A list PlanLayers accepts for an input shape and class count is
// one Model::Create builds for them (memory aside).
//
// Shapes are per example, without the batch dimension: (H, W, C) for images,
// (features) for flat tensors.
//
// Thread-safety: pure functions.
#ifndef YOKE_ENGINE_SHAPES_LAYER_SHAPES_H_
#define YOKE_ENGINE_SHAPES_LAYER_SHAPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::engine::shapes {

// The same type as engine/tensor.h's Shape and engine/zoo's ZooShape.
using LayerShape = std::vector<int64_t>;

// "(28, 28, 1)", as engine::ShapeString writes a shape.
std::string ShapeText(const LayerShape& shape);

// The product of the dimensions (1 for a scalar).
int64_t Elements(const LayerShape& shape);

// ---------------------------------------------------------------- arguments

// The name of the kind a LayerSpec holds ("dense", "conv2d", ...; "" when none).
std::string KindName(const v1::LayerSpec& spec);

// Every argument rule the layer's kind breaks, each as "<kind>.<field>: rule,
// got value" (e.g. "conv2d.kernel: must be > 0, got 0"); empty when none.
// A spec with no kind breaks none here (the callers name that themselves).
std::vector<std::string> ArgumentErrors(const v1::LayerSpec& spec);

// A window layer's arguments with the defaults applied: conv2d stride 1 and
// padding same; pooling size 2, stride = size and padding valid.
struct Window {
  int64_t size = 0;  // the square window (a conv's kernel)
  int64_t stride = 1;
  bool same = false;  // padding "same" (else "valid")
};
Window Conv2dWindow(const v1::Conv2dSpec& c);
Window Pool2dWindow(const v1::Pool2dSpec& p);

// The leaky_relu slope with its default (0, which proto3 cannot tell from
// unset, means 0.01); batch_norm's momentum (0.1) and epsilon (1e-5).
float LeakyReluAlpha(const v1::LeakyReluSpec& s);
float BatchNormMomentum(const v1::BatchNormSpec& s);
float BatchNormEpsilon(const v1::BatchNormSpec& s);

// ---------------------------------------------------------------- one layer

// Output size and padding of one spatial dimension of a window op, with
// TensorFlow's conventions:
//   same:  out = ceil(in / stride); total padding
//          max((out - 1) * stride + window - in, 0), split floor/ceil with the
//          larger half after (bottom/right).
//   valid: out = floor((in - window) / stride) + 1, or 0 when the window does
//          not fit; no padding. Trailing rows no window reaches are ignored.
struct Padding1d {
  int64_t out = 0;     // output size
  int64_t before = 0;  // zero rows before (top/left)
  int64_t after = 0;   // zero rows after (bottom/right)
};
Padding1d ComputePadding(int64_t in, int64_t window, int64_t stride, bool same);

// Each kind's output shape for its inputs, or INVALID_ARGUMENT with the
// message the engine's layer gives as it is built ("conv2d: a 5x5 window
// with padding 'valid' does not fit input (3, 3, 1); ..."). `type` is the
// kind's name where one function serves several kinds.
absl::StatusOr<LayerShape> DenseOutput(const std::vector<LayerShape>& in, int64_t units);
absl::StatusOr<LayerShape> Conv2dOutput(const std::vector<LayerShape>& in, int64_t filters,
                                        const Window& w);
absl::StatusOr<LayerShape> Pool2dOutput(const std::string& type, const std::vector<LayerShape>& in,
                                        const Window& w);
absl::StatusOr<LayerShape> GlobalAvgPoolOutput(const std::vector<LayerShape>& in);
absl::StatusOr<LayerShape> FlattenOutput(const std::vector<LayerShape>& in);
absl::StatusOr<LayerShape> BatchNormOutput(const std::vector<LayerShape>& in);
absl::StatusOr<LayerShape> SoftmaxOutput(const std::vector<LayerShape>& in);
absl::StatusOr<LayerShape> AddOutput(const std::vector<LayerShape>& in);
// dropout and the activations: one input, its shape unchanged.
absl::StatusOr<LayerShape> ElementwiseOutput(const std::string& type,
                                             const std::vector<LayerShape>& in);

// The output shape of the layer `spec` describes, dispatching on its kind
// (arguments with their defaults). Assumes ArgumentErrors(spec) is empty.
absl::StatusOr<LayerShape> OutputShape(const v1::LayerSpec& spec,
                                       const std::vector<LayerShape>& in);

// ---------------------------------------------------------------- the list

// A layer list resolved as a graph. Input index -1 is the model input.
struct LayerPlan {
  std::vector<std::string> names;        // explicit, else "<kind>_<index>"
  std::vector<std::vector<int>> inputs;  // per layer, the layers it reads
  std::vector<LayerShape> shapes;        // per layer, its output (if known)
};

// Resolves `layers` (named "<path>[i]" in messages, e.g. "model.layers") for
// the per-example `input` shape and `num_classes`, with Model::Create's
// messages: an empty list; a layer without a kind or with a bad argument
// ("<path>[i]: conv2d.kernel: must be > 0, got 0"); a name taken or 'input';
// an input that names no earlier layer; a shape rule ("<path>[i] (name):
// ..."); an output nobody reads but the last; a last layer whose output is
// not (num_classes). All INVALID_ARGUMENT; the first found is returned.
//
// With no input shape (a dataset the caller cannot see), the rules that need
// shapes are skipped and `shapes` stays empty: what is left is the graph.
// A negative num_classes skips the logits rule alone (for callers that want
// the shapes whatever the class count, like the memory estimate).
absl::StatusOr<LayerPlan> PlanLayers(const std::vector<v1::LayerSpec>& layers,
                                     const std::string& path,
                                     const std::optional<LayerShape>& input, int num_classes);
// The same for a spec's own list, without copying it (a list may hold
// hundreds of thousands of layers).
absl::StatusOr<LayerPlan> PlanLayers(
    const google::protobuf::RepeatedPtrField<v1::LayerSpec>& layers, const std::string& path,
    const std::optional<LayerShape>& input, int num_classes);

// The layers b in [1, n) before which a list of n layers may be cut: no
// layer from b on reads anything before layer b - 1 (the model input, -1,
// included), so layer b - 1's output is the only one that crosses.
// `inputs[j]` lists layer j's inputs (LayerPlan::inputs). Increasing. These
// are the pipeline's stage boundaries (Model::PipelineCuts) and the segments
// of activation recomputation (Model::SetRecompute, and the submit-time
// memory estimate's account of it).
std::vector<int> CutPoints(const std::vector<std::vector<int>>& inputs);

}  // namespace yoke::engine::shapes

#endif  // YOKE_ENGINE_SHAPES_LAYER_SHAPES_H_
