// conv2d on CUDA: cuDNN graph-API convolutions (kernels/cuda/conv_graph.h),
// fp32, NHWC.
//
// x: (N, H, W, C) -> y: (N, H', W', K), parameters as the CPU layer
// (engine/layers/conv2d.h): kernel W (K, kernel, kernel, C) "ohwi" (cuDNN's
// KRSC), bias b (K) unless no_bias. Padding "same" is TensorFlow's split,
// the odd row/column at the bottom/right, as cuDNN pre/post padding. The
// bias and its gradient (a sum over N*H'*W' per channel) are the
// deterministic kernels of kernels/cuda/bias.h.
//
// Asymmetric padding (every stride-2 "same" layer) is made explicit: the
// input is copied with zero bottom rows and right columns
// (kernels/cuda/conv_pad.h) and cuDNN convolves it with equal padding on
// both sides; backward-data is cropped back. cuDNN's fp32 engines without
// tensor cores may not take unequal pre/post padding, so this is the path
// that works everywhere; YOKE_CUDNN_ASYMMETRIC_PADDING=1 hands cuDNN the
// asymmetric padding instead (to measure it on a GPU).
//
// The graphs are shared by every layer of the same geometry on a device
// (ConvGraphFor); the layer remembers those of the batch sizes it has seen.
//
// Thread-safety: as Layer.
#ifndef YOKE_ENGINE_LAYERS_CUDA_CONV2D_H_
#define YOKE_ENGINE_LAYERS_CUDA_CONV2D_H_

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/kernels/cuda/conv_graph.h"
#include "engine/layers/cuda/cuda_layer.h"

namespace yoke::engine::cuda {

class CudaConv2dLayer final : public CudaLayer {
 public:
  CudaConv2dLayer(std::unique_ptr<Layer> twin, const v1::LayerSpec& spec)
      : CudaLayer(std::move(twin), spec) {}

  absl::Status Forward(const std::vector<const Tensor*>& in, Tensor* out,
                       const LayerContext& ctx) override;
  absl::Status Backward(const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& dout,
                        const std::vector<Tensor*>& din, const LayerContext& ctx) override;

 private:
  // One batch size's geometry and graphs (null until first needed).
  struct Graphs {
    ConvGeometry geom;  // what cuDNN runs (on the padded input when padded)
    ConvGraph* pass[3] = {nullptr, nullptr, nullptr};  // by ConvPass
    bool padded = false;  // explicit padding: xp and dxp hold the padded tensors
    Tensor xp, dxp;
  };
  bool has_bias() const { return num_params() > 1; }
  // The geometry and graphs of x's batch size.
  absl::StatusOr<Graphs*> Entry(const Tensor& x);
  // The graph of `pass` for that entry on x's device.
  absl::StatusOr<ConvGraph*> Graph(const Tensor& x, Graphs* e, ConvPass pass);
  // The input cuDNN reads: x, or x padded into e->xp.
  absl::StatusOr<const float*> Input(DeviceContext* dc, const Tensor& x, Graphs* e);
  // Rows of the output as a (rows, K) matrix: N * H' * W'.
  int64_t OutputRows(int64_t n) const { return n * output_shape()[0] * output_shape()[1]; }

  std::map<int64_t, Graphs> graphs_;  // by batch size
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_LAYERS_CUDA_CONV2D_H_
