// The cuDNN graphs (frontend graph API) of a 2-D convolution, fp32, NHWC.
//
// Three graphs per geometry, one per pass:
//   kForward          y (N, OH, OW, K) = conv(x (N, H, W, C), W (K, kh, kw, C))
//   kBackwardData     dx (N, H, W, C)  = dgrad(dy, W)
//   kBackwardWeights  dW (K, kh, kw, C) = wgrad(dy, x)
// Tensors are Yoke's row-major NHWC buffers; the kernel's "ohwi" layout is
// cuDNN's KRSC. Padding is TensorFlow's "same" split (engine/shapes/
// ComputePadding): cuDNN takes it as asymmetric pre/post padding, so the odd
// row/column goes to the bottom/right exactly as on the CPU.
//
// Numerics: io, intermediate and compute types are float; engines that
// down-convert inputs (TF32) or use tensor cores are never taken, and
// non-deterministic ones only when cuDNN offers no deterministic engine for
// the graph (deterministic() then says false).
//
// A ConvGraph is created and validated on the host (no device needed); its
// execution plan is chosen on the first Execute, by cuDNN's heuristics
// (mode A, then the fallback list), with the workspace from ctx. Graphs are
// cached process-wide per (device, pass, geometry): layers of one geometry
// share them. This header does not include the cuDNN frontend (it takes about
// 40 s to compile); conv_graph.cc alone does.
//
// Thread-safety: ConvGraphFor is thread-safe; a ConvGraph is used by the one
// thread that drives its device (as DeviceContext).
#ifndef YOKE_ENGINE_KERNELS_CUDA_CONV_GRAPH_H_
#define YOKE_ENGINE_KERNELS_CUDA_CONV_GRAPH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kernels/cuda/device_context.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::engine::cuda {

// A convolution at one batch size; square kernels and strides for Yoke's
// conv2d, dilation 1.
struct ConvGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input (N, H, W, C)
  int64_t k = 0, kh = 0, kw = 0;       // kernel (K, kh, kw, C)
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t oh = 0, ow = 0;  // output (N, OH, OW, K), Yoke's shape rules
  // TF32 allowed: tensor-core engines that read fp32 inputs at TF32
  // precision (training.precision: tf32). Off: fp32 arithmetic only.
  bool tf32 = false;
  bool operator<(const ConvGeometry& o) const;
};

// The geometry of conv2d `spec` on per-example input (H, W, C) at batch n,
// as the CPU layer computes it. INVALID_ARGUMENT for an input the CPU layer
// refuses.
absl::StatusOr<ConvGeometry> GeometryForConv2d(const v1::Conv2dSpec& spec,
                                               const std::vector<int64_t>& input, int64_t n);

// True when `g` pads more at the bottom than the top, or more at the right
// than the left (TensorFlow "same" on every stride-2 layer).
bool Asymmetric(const ConvGeometry& g);
// The same convolution on an input with the extra bottom rows and right
// columns added as zeros (math/conv_pad.h): H + bottom - top by
// W + right - left, padded equally on both sides, with the same output.
ConvGeometry SymmetricOnPaddedInput(const ConvGeometry& g);

enum class ConvPass { kForward, kBackwardData, kBackwardWeights };

class ConvGraph {
 public:
  ~ConvGraph();
  ConvGraph(const ConvGraph&) = delete;
  ConvGraph& operator=(const ConvGraph&) = delete;

  // Builds the graph of `pass` and validates it (host only). INTERNAL with
  // the frontend's message when cuDNN refuses it.
  static absl::StatusOr<std::unique_ptr<ConvGraph>> Create(ConvPass pass, const ConvGeometry& g);

  // The output tensor's dims and strides as the validated graph holds them,
  // in cuDNN's order: (N, K, OH, OW) for kForward (inferred by cuDNN from the
  // paddings), (N, C, H, W) for kBackwardData, (K, C, kh, kw) for
  // kBackwardWeights.
  std::vector<int64_t> output_dims() const;
  std::vector<int64_t> output_strides() const;
  // The paddings the convolution was given, (top, left) and (bottom, right).
  std::vector<int64_t> pre_padding() const;
  std::vector<int64_t> post_padding() const;

  // Runs the pass on ctx->stream(), overwriting the output:
  //   kForward:          a = x,  b = W, out = y
  //   kBackwardData:     a = dy, b = W, out = dx
  //   kBackwardWeights:  a = dy, b = x, out = dW
  // The first call builds the execution plan (needs the device); INTERNAL
  // when cuDNN has none for this graph.
  absl::Status Execute(DeviceContext* ctx, const float* a, const float* b, float* out);

  // False when the plan Execute built may give different bits run to run
  // (true before the first Execute).
  bool deterministic() const;

 private:
  struct Impl;
  explicit ConvGraph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The cached graph of `pass` for `g` on device `device`, created (and
// validated) on first use.
absl::StatusOr<ConvGraph*> ConvGraphFor(int device, ConvPass pass, const ConvGeometry& g);

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_CONV_GRAPH_H_
