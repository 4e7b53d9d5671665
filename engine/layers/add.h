// add: y = x_0 + x_1 + ... (residual joins).
//
// x_i: (N, ...) all of one shape, at least 2 of them -> y: (N, ...).
// Backward hands dy unchanged to every input that needs a gradient. No
// parameters. With a fused ReLU, y = max(sum, 0).
//
// Thread-safety: as Layer (one instance per replica).
#ifndef YOKE_ENGINE_LAYERS_ADD_H_
#define YOKE_ENGINE_LAYERS_ADD_H_

#include "engine/layer.h"

namespace yoke::engine {

class AddLayer final : public Layer {
 public:
  const char* type() const override { return "add"; }
  // INVALID_ARGUMENT for fewer than 2 inputs or differing shapes (naming both).
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  // x_i: (N, ...) -> y: (N, ...)
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  // dy: (N, ...) -> dx_i = dy for every non-null din[i]
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;
  // Backward never reads `out`: the ReLU after a residual join is applied
  // in the same pass, in this layer's buffer.
  bool FuseRelu() override {
    relu_ = true;
    return true;
  }
  bool BackwardReadsOutput() const override { return false; }
  // Two inputs: y may be either of them (each element read before it is
  // written). With more, the later inputs are read after y is written.
  bool MayOverwriteInput() const override { return inputs_ == 2; }
  bool BackwardReadsInputs() const override { return false; }  // dx = dy

 private:
  bool relu_ = false;
  size_t inputs_ = 0;  // from Build
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_ADD_H_
