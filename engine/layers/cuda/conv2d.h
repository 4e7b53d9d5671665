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
    ConvGeometry geom;
    ConvGraph* pass[3] = {nullptr, nullptr, nullptr};  // by ConvPass
  };
  bool has_bias() const { return num_params() > 1; }
  // The graph of `pass` for x's batch size on x's device.
  absl::StatusOr<ConvGraph*> Graph(const Tensor& x, ConvPass pass);
  // Rows of the output as a (rows, K) matrix: N * H' * W'.
  int64_t OutputRows(int64_t n) const { return n * output_shape()[0] * output_shape()[1]; }

  std::map<int64_t, Graphs> graphs_;  // by batch size
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_LAYERS_CUDA_CONV2D_H_
