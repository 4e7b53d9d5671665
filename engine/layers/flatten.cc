#include "engine/layers/flatten.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {

absl::StatusOr<Shape> FlattenLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  // The shape rules are shared with job validation (engine/shapes/).
  return shapes::FlattenOutput(inputs);
}

// The model owns a separate output buffer per node, so flatten is a copy
// rather than an alias; it is a memory-bandwidth pass, small next to the
// convolution that precedes it.
absl::Status FlattenLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                   const LayerContext& ctx) {
  std::memcpy(out->raw(), in[0]->raw(), in[0]->bytes());
  return absl::OkStatus();
}

absl::Status FlattenLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                    const Tensor& dout, const std::vector<Tensor*>& din,
                                    const LayerContext& ctx) {
  if (din[0] != nullptr) std::memcpy(din[0]->raw(), dout.raw(), dout.bytes());
  return absl::OkStatus();
}

namespace {
absl::StatusOr<std::unique_ptr<Layer>> MakeFlatten(const v1::LayerSpec&) {
  return std::unique_ptr<Layer>(new FlattenLayer());
}
}  // namespace

YOKE_REGISTER_LAYER("flatten", MakeFlatten);

}  // namespace yoke::engine
