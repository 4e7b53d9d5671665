#include "engine/layers/cuda/conv2d.h"

#include <cstdlib>
#include <string>

#include "common/status.h"
#include "engine/kernels/cuda/bias.h"
#include "engine/kernels/cuda/conv_pad.h"

namespace yoke::engine::cuda {

namespace {

// YOKE_CUDNN_ASYMMETRIC_PADDING=1: give cuDNN unequal pre/post padding.
bool NativeAsymmetricPadding() {
  static const bool on = [] {
    const char* v = std::getenv("YOKE_CUDNN_ASYMMETRIC_PADDING");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

}  // namespace

absl::StatusOr<CudaConv2dLayer::Graphs*> CudaConv2dLayer::Entry(const Tensor& x) {
  const int64_t n = x.dim(0);
  auto it = graphs_.find(n);
  if (it == graphs_.end()) {
    // An epoch sees at most two batch sizes; forget the rest.
    if (graphs_.size() >= 4) graphs_.clear();
    ASSIGN_OR_RETURN(ConvGeometry g, GeometryForConv2d(spec().conv2d(), input_shapes()[0], n));
    ASSIGN_OR_RETURN(DeviceContext * dc, Context(x));
    g.tf32 = dc->tf32();
    Graphs e;
    e.padded = Asymmetric(g) && !NativeAsymmetricPadding();
    e.geom = e.padded ? SymmetricOnPaddedInput(g) : g;
    it = graphs_.emplace(n, std::move(e)).first;
  }
  return &it->second;
}

absl::StatusOr<ConvGraph*> CudaConv2dLayer::Graph(const Tensor& x, Graphs* e, ConvPass pass) {
  ConvGraph*& graph = e->pass[static_cast<int>(pass)];
  if (graph == nullptr) {
    ASSIGN_OR_RETURN(graph, ConvGraphFor(x.device().index, pass, e->geom));
  }
  return graph;
}

absl::StatusOr<const float*> CudaConv2dLayer::Input(DeviceContext* dc, const Tensor& x, Graphs* e) {
  if (!e->padded) return x.data<float>();
  const ConvGeometry& g = e->geom;
  if (!e->xp.defined()) {
    ASSIGN_OR_RETURN(e->xp, Tensor::Allocate({g.n, g.h, g.w, g.c}, DType::kF32, x.device(),
                                             "the padded input of layer " + name()));
  }
  RETURN_IF_ERROR(PadBottomRight(dc, x.data<float>(), e->xp.data<float>(), g.n, x.dim(1), x.dim(2),
                                 g.c, g.h, g.w));
  return e->xp.data<float>();
}

absl::Status CudaConv2dLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                      const LayerContext& ctx) {
  const Tensor& x = *in[0];
  ASSIGN_OR_RETURN(DeviceContext * dc, Context(x));
  ASSIGN_OR_RETURN(Graphs * e, Entry(x));
  ASSIGN_OR_RETURN(ConvGraph * fprop, Graph(x, e, ConvPass::kForward));
  ASSIGN_OR_RETURN(const float* xin, Input(dc, x, e));
  float* y = out->data<float>();
  RETURN_IF_ERROR(fprop->Execute(dc, xin, param(0).data<float>(), y));
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
  ASSIGN_OR_RETURN(Graphs * e, Entry(x));
  const float* dy = dout.data<float>();
  ASSIGN_OR_RETURN(ConvGraph * wgrad, Graph(x, e, ConvPass::kBackwardWeights));
  // Padded again rather than trusting the Forward's copy: cheap, and right
  // even if another batch size ran in between.
  ASSIGN_OR_RETURN(const float* xin, Input(dc, x, e));
  RETURN_IF_ERROR(wgrad->Execute(dc, dy, xin, param_grad(0).data<float>()));
  if (has_bias()) {
    RETURN_IF_ERROR(
        BiasGradient(dc, dy, param_grad(1).data<float>(), OutputRows(x.dim(0)), output_shape()[2]));
  }
  if (din[0] == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(ConvGraph * dgrad, Graph(x, e, ConvPass::kBackwardData));
  if (!e->padded) return dgrad->Execute(dc, dy, param(0).data<float>(), din[0]->data<float>());
  const ConvGeometry& g = e->geom;
  if (!e->dxp.defined()) {
    ASSIGN_OR_RETURN(e->dxp, Tensor::Allocate({g.n, g.h, g.w, g.c}, DType::kF32, x.device(),
                                              "the padded input gradient of layer " + name()));
  }
  RETURN_IF_ERROR(dgrad->Execute(dc, dy, param(0).data<float>(), e->dxp.data<float>()));
  return CropBottomRight(dc, e->dxp.data<float>(), din[0]->data<float>(), g.n, x.dim(1), x.dim(2),
                         g.c, g.h, g.w);
}

YOKE_REGISTER_DEVICE_LAYER("conv2d", Device::Kind::kCUDA, CudaFactory<CudaConv2dLayer>());

}  // namespace yoke::engine::cuda
