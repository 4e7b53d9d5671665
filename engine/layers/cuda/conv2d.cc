#include "engine/layers/cuda/conv2d.h"

#include "common/status.h"
#include "engine/kernels/cuda/bias.h"

namespace yoke::engine::cuda {

absl::StatusOr<ConvGraph*> CudaConv2dLayer::Graph(const Tensor& x, ConvPass pass) {
  const int64_t n = x.dim(0);
  auto it = graphs_.find(n);
  if (it == graphs_.end()) {
    // An epoch sees at most two batch sizes; forget the rest.
    if (graphs_.size() >= 4) graphs_.clear();
    ASSIGN_OR_RETURN(ConvGeometry g, GeometryForConv2d(spec().conv2d(), input_shapes()[0], n));
    it = graphs_.emplace(n, Graphs{g}).first;
  }
  ConvGraph*& graph = it->second.pass[static_cast<int>(pass)];
  if (graph == nullptr) {
    ASSIGN_OR_RETURN(graph, ConvGraphFor(x.device().index, pass, it->second.geom));
  }
  return graph;
}

absl::Status CudaConv2dLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                      const LayerContext& ctx) {
  const Tensor& x = *in[0];
  ASSIGN_OR_RETURN(DeviceContext * dc, Context(x));
  ASSIGN_OR_RETURN(ConvGraph * fprop, Graph(x, ConvPass::kForward));
  float* y = out->data<float>();
  RETURN_IF_ERROR(fprop->Execute(dc, x.data<float>(), param(0).data<float>(), y));
  if (has_bias()) {
    RETURN_IF_ERROR(
        BiasAdd(dc, y, param(1).data<float>(), OutputRows(x.dim(0)), output_shape()[2]));
  }
  return absl::OkStatus();
}

absl::Status CudaConv2dLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                       const Tensor& dout, const std::vector<Tensor*>& din,
                                       const LayerContext& ctx) {
  const Tensor& x = *in[0];
  ASSIGN_OR_RETURN(DeviceContext * dc, Context(x));
  const float* dy = dout.data<float>();
  ASSIGN_OR_RETURN(ConvGraph * wgrad, Graph(x, ConvPass::kBackwardWeights));
  RETURN_IF_ERROR(wgrad->Execute(dc, dy, x.data<float>(), param_grad(0).data<float>()));
  if (has_bias()) {
    RETURN_IF_ERROR(
        BiasGradient(dc, dy, param_grad(1).data<float>(), OutputRows(x.dim(0)), output_shape()[2]));
  }
  if (din[0] != nullptr) {
    ASSIGN_OR_RETURN(ConvGraph * dgrad, Graph(x, ConvPass::kBackwardData));
    RETURN_IF_ERROR(dgrad->Execute(dc, dy, param(0).data<float>(), din[0]->data<float>()));
  }
  return absl::OkStatus();
}

YOKE_REGISTER_DEVICE_LAYER("conv2d", Device::Kind::kCUDA, CudaFactory<CudaConv2dLayer>());

}  // namespace yoke::engine::cuda
