// dense: y = x W + b, on the last dimension.
//
// x: (N, D) -> y: (N, U). Parameters: kernel W: (D, U), bias b: (U).
// Inputs of higher rank must be flattened first (a `flatten` layer).
// Initialisation follows PyTorch's nn.Linear: W, b ~ U(-1/sqrt(D), 1/sqrt(D)).
#ifndef YOKE_ENGINE_LAYERS_DENSE_H_
#define YOKE_ENGINE_LAYERS_DENSE_H_

#include <memory>
#include <vector>

#include "engine/kernels/cpu/gemm.h"
#include "engine/layer.h"

namespace yoke::engine {

class DenseLayer final : public Layer {
 public:
  DenseLayer(int64_t units, bool bias) : units_(units), bias_(bias) {}
  const char* type() const override { return "dense"; }
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;
  int64_t ForwardMacsPerExample() const override { return in_dim_ * units_; }

 private:
  int64_t units_;
  bool bias_;
  int64_t in_dim_ = 0;
  int w_ = -1, b_ = -1;
  // dx^T (D, N) for the transposed backward-data product (dense.cc), kept
  // between steps so that a steady-state step allocates nothing.
  std::vector<float> dx_t_;
  // The oneDNN matmuls of that product, one per batch size seen (an epoch
  // has at most two: the full batches and a short last one).
  std::vector<std::unique_ptr<cpu::MatmulPlan>> dx_t_plans_;
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_DENSE_H_
