// conv2d: 2-D convolution over channels-last images, through oneDNN.
//
// x: (N, H, W, C) -> y: (N, H', W', K). Square window `kernel`, `stride`,
// dilation 1. Padding "same" gives H' = ceil(H / stride) and pads as
// TensorFlow does: total = max((H' - 1) * stride + kernel - H, 0), split with
// the odd row/column at the bottom/right. "valid" gives
// H' = floor((H - kernel) / stride) + 1 with no padding.
//
// Parameters: kernel W: (K, kernel, kernel, C) ("ohwi", plain row-major),
// bias b: (K) unless no_bias. Both start from PyTorch's nn.Conv2d default,
// U(-1/sqrt(C*kernel*kernel), +1/sqrt(C*kernel*kernel)).
//
// oneDNN primitives are built once per batch size and cached, so a steady-state
// step builds and allocates nothing.
#ifndef YOKE_ENGINE_LAYERS_CONV2D_H_
#define YOKE_ENGINE_LAYERS_CONV2D_H_

#include <map>
#include <memory>

#include "engine/kernels/cpu/conv.h"
#include "engine/layer.h"

namespace yoke::engine {

class Conv2dLayer final : public Layer {
 public:
  // Values must already be valid (the registered factory checks the spec).
  Conv2dLayer(int64_t filters, int64_t kernel, int64_t stride, bool same_padding, bool bias)
      : filters_(filters), kernel_(kernel), stride_(stride), same_(same_padding), bias_(bias) {}
  const char* type() const override { return "conv2d"; }
  absl::StatusOr<Shape> Build(const std::vector<Shape>& inputs, ParamSet* params) override;
  // x: (N, H, W, C) -> y: (N, H', W', K)
  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  // dy: (N, H', W', K) -> dW, db, and dx: (N, H, W, C) when din[0] is set
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;
  int64_t ForwardMacsPerExample() const override;
  // The convolution applies the ReLU as a oneDNN post-op; Backward never
  // reads `out`, so it may hold the activation.
  bool FuseRelu() override;
  // Backward reads x, dy and the weights, never `out`.
  bool BackwardReadsOutput() const override { return false; }
  // With one input channel and the direct kernels (conv_c1.h), the
  // convolution also takes the 2x2 maxima of its ReLU'd output in registers
  // and writes only them (Conv2dGeometry::pool).
  bool AbsorbMaxPool2x2() override;
  // oneDNN's bf16 kernels (Conv2dGeometry::bf16); the CPU layer only.
  // False for a convolution the one-channel direct kernels run: in fp32.
  bool UseBf16(bool on) override;

 private:
  // The cached plan for batch `n`; builds it on first use. `backward_data`
  // requests a plan that can also compute dx (rebuilt once if needed).
  absl::StatusOr<cpu::Conv2dPlan*> PlanFor(int64_t n, bool backward_data);

  int64_t filters_, kernel_, stride_;
  bool same_, bias_;
  cpu::Conv2dGeometry geom_;  // per-example geometry (n unset)
  int w_ = -1, b_ = -1;
  struct CachedPlan {
    std::unique_ptr<cpu::Conv2dPlan> plan;
    bool backward_data = false;
  };
  std::map<int64_t, CachedPlan> plans_;  // by batch size
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_LAYERS_CONV2D_H_
