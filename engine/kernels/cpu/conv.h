// 2-D convolution on the CPU through oneDNN: forward, backward-data and
// backward-weights for one fixed geometry (batch size included).
//
// Activations are channels-last, x: (N, H, W, C) -> y: (N, OH, OW, K).
// Weights are kept by the caller in the plain layout (K, KH, KW, C) ("ohwi"),
// bias in (K). The primitives may prefer a blocked weight layout; the plan
// reorders the plain weights into it on every Forward (the optimizer changes
// them between steps) and reorders the weight gradient back to plain, into
// buffers it allocated once, so a steady-state step allocates nothing.
//
// Thread-safety: a plan belongs to one layer of one replica; not thread-safe.
// It runs on the calling thread's oneDNN stream (dnnl_context.h).
#ifndef YOKE_ENGINE_KERNELS_CPU_CONV_H_
#define YOKE_ENGINE_KERNELS_CPU_CONV_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dnnl.hpp"

namespace yoke::engine::cpu {

class SingleChannelConv;

struct Conv2dGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;  // input (N, H, W, C)
  int64_t k = 0;                       // output channels (filters)
  int64_t kh = 1, kw = 1;              // window
  int64_t stride_h = 1, stride_w = 1;
  // Zero padding before (top/left) and after (bottom/right) the input. After-
  // padding may be smaller than needed to reach the last column: rows and
  // columns no window covers are ignored (and get a zero input gradient).
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t oh = 0, ow = 0;  // output spatial size
  bool bias = true;
  // Forward writes max(y, 0) instead of y (a oneDNN post-op applied in the
  // kernel's registers, so the result is bit for bit a separate ReLU's).
  // Backward is unchanged: the caller masks dy before BackwardData and
  // BackwardWeights, as a ReLU layer would.
  bool relu = false;
  // Forward also max-pools its ReLU'd output in 2x2 windows of stride 2
  // (a last odd row or column is dropped, as Pool2dPlan does): y is
  // (N, OH/2, OW/2, K), and BackwardWeights takes that pooled output's
  // gradient, passing it to each window's first maximum where positive, bit
  // for bit as the max-pool's backward through the ReLU would. Only the
  // direct kernels do this (conv_c1.h); the plan has no BackwardData.
  bool pool = false;
  // Compute in bf16 (training.precision: bf16): the callers' tensors stay
  // fp32, and every oneDNN primitive reads x, w and dy rounded to bf16
  // (round to nearest even) and sums their products in fp32 into fp32 y, dx
  // and dw: Intel AMX or AVX-512 BF16 kernels where the CPU has them. x and
  // dy are rounded into a per-thread scratch shared by every plan, sized to
  // the largest (Bf16ScratchBytes), so a layer keeps no bf16 copy of its
  // activations. The one-channel direct kernels (conv_c1.h), where they
  // apply, still run in fp32: their layer has too little work for AMX.
  bool bf16 = false;

  std::string DebugString() const;
};

// Whether this CPU runs bf16 convolutions in hardware (oneDNN's ISA has
// AVX-512 BF16 or AMX), and the ISA oneDNN uses, for messages ("avx512_core_amx").
bool CpuHasNativeBf16();
std::string CpuIsaName();
// The calling thread's bf16 scratch now (bytes): what the largest plan run
// on it needed so far.
int64_t Bf16ScratchBytes();

class Conv2dPlan {
 public:
  // Builds the three primitives. `need_backward_data` false skips building
  // backward-data (the layer reading the model input never needs dx), and
  // all of them when the direct kernels run Forward and BackwardWeights.
  // `own_kernels` lets Forward and BackwardWeights run Yoke's direct kernels
  // where they apply (one input channel: conv_c1.h); tests turn it off to
  // compare them with oneDNN. INTERNAL when oneDNN rejects the geometry;
  // INVALID_ARGUMENT for g.pool where the direct kernels do not apply, or
  // with `need_backward_data`.
  static absl::StatusOr<std::unique_ptr<Conv2dPlan>> Create(const Conv2dGeometry& g,
                                                            bool need_backward_data,
                                                            bool own_kernels = true);
  ~Conv2dPlan();

  // x: (N, H, W, C), w: (K, KH, KW, C), b: (K) or null -> y: (N, OH, OW, K).
  absl::Status Forward(const float* x, const float* w, const float* b, float* y);

  // dy: (N, OH, OW, K), w: (K, KH, KW, C) -> dx: (N, H, W, C) (overwritten).
  // `w` must be the weights of the preceding Forward (their reordered copy is
  // reused when both primitives want the same layout).
  absl::Status BackwardData(const float* dy, const float* w, float* dx);

  // x: (N, H, W, C), dy: (N, OH, OW, K) -> dw: (K, KH, KW, C) and, when the
  // plan has a bias, db: (K); both overwritten.
  absl::Status BackwardWeights(const float* x, const float* dy, float* dw, float* db);

  const Conv2dGeometry& geometry() const { return g_; }
  // True when Forward and BackwardWeights run the direct one-channel kernels.
  bool uses_own_kernels() const { return c1_ != nullptr; }

 private:
  Conv2dPlan() = default;
  absl::Status Build(bool need_backward_data);

  Conv2dGeometry g_;
  std::unique_ptr<SingleChannelConv> c1_;  // null: oneDNN runs everything
  dnnl::memory::desc x_md_, y_md_, w_plain_md_, b_md_;
  // bf16: what the primitives read (x and dy rounded), in the scratch.
  dnnl::memory::desc x_lp_md_, dy_lp_md_;
  dnnl::memory x_lp_mem_, dy_lp_mem_;
  dnnl::reorder x_to_lp_, dy_to_lp_;
  // Points x_lp_mem_ / dy_lp_mem_ at the scratch and rounds x / dy into
  // it. RoundDy skips the rounding when the scratch still holds this dy
  // from this plan's previous call (BackwardWeights then BackwardData).
  // bf16 1x1 convolutions without padding or bias: their backward as two
  // matrix products over the M = N*OH*OW output pixels, which oneDNN's AMX
  // matmul runs several times faster than its convolution backward
  // (bench/README.md): dx (M x C) = dy (M x K) w (K x C), and
  // dw (K x C) = dy^T (K x M) x (M x C). With stride s (and H = s*OH,
  // W = s*OW), x is the pixels the windows read, gathered as it is rounded,
  // and dx is zero but at those pixels, where the product is scattered.
  bool matmul_backward_ = false;
  dnnl::matmul mm_data_, mm_weights_;
  dnnl::memory mm_dy_mem_, mm_dyt_mem_, mm_x_mem_, mm_w_plain_mem_, mm_w_mem_, mm_dx_mem_,
      mm_dw_mem_;
  dnnl::reorder mm_w_to_;
  // Strided: x_read_mem_ views the pixels the windows read in x, and
  // x_read_to_lp_ gathers them, rounded, into x_gathered_mem_ (the scratch).
  bool gather_x_ = false;
  dnnl::memory x_read_mem_, x_gathered_mem_;
  dnnl::reorder x_read_to_lp_;
  // Strided backward-data: the product (dense, in the scratch), scattered
  // through dx_read_mem_ (the same view over dx).
  dnnl::memory dx_dense_mem_, dx_read_mem_;
  dnnl::reorder dx_scatter_;
  // Rounds what BackwardWeights reads of x into the scratch; returns it.
  void* RoundXRead(const float* x);
  void BuildMatmulBackward();
  // The memories over the callers' buffers (handles set per call), and the
  // bf16 ones with their rounding reorders.
  void BindUserMemories();
  void RoundX(const float* x);
  void RoundDy(const float* dy);
  const float* rounded_dy_ = nullptr;
  uint64_t rounded_dy_generation_ = 0;
  // Reorders `from` into `dst`, pointed at the thread's scratch region for
  // reordered weights.
  void ReorderWeights(dnnl::reorder& to, dnnl::memory& from, dnnl::memory& dst);

  dnnl::convolution_forward fwd_;
  dnnl::convolution_backward_data bwd_data_;
  dnnl::convolution_backward_weights bwd_w_;
  bool has_bwd_data_ = false;

  // User-side memories: their handles are pointed at the caller's buffers on
  // every call.
  dnnl::memory x_mem_, y_mem_, w_plain_mem_, b_mem_, dx_mem_, dy_mem_, dw_plain_mem_, db_mem_;
  // Weights in each primitive's preferred layout, in the thread's scratch;
  // equal to the plain memories (no reorder) when the primitive takes the
  // plain layout.
  dnnl::memory fwd_w_mem_, bwd_data_w_mem_, bwd_w_dw_mem_;
  bool fwd_w_reorder_ = false, bwd_data_w_reorder_ = false, dw_reorder_ = false;
  dnnl::reorder fwd_w_to_, bwd_data_w_to_, dw_from_;

  std::unordered_map<int, dnnl::memory> fwd_args_, bwd_data_args_, bwd_w_args_;
};

}  // namespace yoke::engine::cpu

#endif  // YOKE_ENGINE_KERNELS_CPU_CONV_H_
