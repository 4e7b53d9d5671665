#include "engine/kernels/cpu/conv.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/allocator.h"
#include "engine/kernels/cpu/conv_c1.h"
#include "engine/kernels/cpu/dnnl_context.h"

namespace yoke::engine::cpu {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

std::string Conv2dGeometry::DebugString() const {
  return absl::StrCat("conv x(", n, ",", h, ",", w, ",", c, ") k=", k, " window ", kh, "x", kw,
                      " stride ", stride_h, "x", stride_w, " pad t", pad_top, " l", pad_left, " b",
                      pad_bottom, " r", pad_right, " -> (", oh, ",", ow, ")", relu ? " +relu" : "",
                      pool ? " +maxpool2x2" : "", bf16 ? " bf16" : "");
}

namespace {

// Out of memory for the scratch, inside a DnnlTry body.
struct ScratchExhausted {};

// One thread's scratch, shared by every plan run on it: regions for the
// rounded x and dy (bf16), for weights reordered into a primitive's layout
// (w) and for the gradient of the weights in the backward primitive's
// layout (dw), each grown to the largest any plan asked for and kept (from
// the CPU allocator, so a model's memory figures count it). A plan keeps no
// copy of its weights of its own: ResNet-50's would be one more copy of its
// parameters for the forward layout and one for the gradient's, outside the
// allocator. `dy_writes` counts the dy region's fillings, so a plan can
// tell that its rounding is still there.
struct ConvScratch {
  struct Region {
    void* data = nullptr;
    size_t bytes = 0;
  };
  Region x, dy, w, dw;
  uint64_t dy_writes = 0;
  ~ConvScratch() {
    for (Region* r : {&x, &dy, &w, &dw}) {
      if (r->data != nullptr) CpuAllocator()->Deallocate(r->data, r->bytes);
    }
  }
  // Throws ScratchExhausted when the allocator has no memory left.
  void* Get(Region& r, size_t bytes) {
    if (r.bytes < bytes) {
      if (r.data != nullptr) CpuAllocator()->Deallocate(r.data, r.bytes);
      r.data = CpuAllocator()->Allocate(bytes);
      r.bytes = r.data == nullptr ? 0 : bytes;
    }
    if (r.data == nullptr) throw ScratchExhausted{};
    return r.data;
  }
};

ConvScratch& Scratch() {
  thread_local ConvScratch s;
  return s;
}

}  // namespace

bool CpuHasNativeBf16() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

std::string CpuIsaName() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    default:
      return "older than avx2";
  }
}

int64_t Bf16ScratchBytes() {
  const ConvScratch& s = Scratch();
  return static_cast<int64_t>(s.x.bytes + s.dy.bytes);
}

void Conv2dPlan::RoundX(const float* x) {
  void* lp = Scratch().Get(Scratch().x, x_lp_md_.get_size());
  x_mem_.set_data_handle(const_cast<float*>(x));
  x_lp_mem_.set_data_handle(lp);
  x_to_lp_.execute(CpuStream(), x_mem_, x_lp_mem_);
}

void Conv2dPlan::ReorderWeights(dnnl::reorder& to, dnnl::memory& from, dnnl::memory& dst) {
  ConvScratch& s = Scratch();
  dst.set_data_handle(s.Get(s.w, dst.get_desc().get_size()));
  to.execute(CpuStream(), from, dst);
}

void Conv2dPlan::RoundDy(const float* dy) {
  ConvScratch& s = Scratch();
  void* lp = s.Get(s.dy, dy_lp_md_.get_size());
  dy_lp_mem_.set_data_handle(lp);
  if (dy == rounded_dy_ && s.dy_writes == rounded_dy_generation_) return;
  dy_mem_.set_data_handle(const_cast<float*>(dy));
  dy_to_lp_.execute(CpuStream(), dy_mem_, dy_lp_mem_);
  rounded_dy_ = dy;
  rounded_dy_generation_ = ++s.dy_writes;
}

Conv2dPlan::~Conv2dPlan() = default;

absl::StatusOr<std::unique_ptr<Conv2dPlan>> Conv2dPlan::Create(const Conv2dGeometry& g,
                                                               bool need_backward_data,
                                                               bool own_kernels) {
  std::unique_ptr<Conv2dPlan> p(new Conv2dPlan());
  p->g_ = g;
  if (own_kernels && SingleChannelConv::Supported(g)) {
    p->c1_ = std::make_unique<SingleChannelConv>(g);
  }
  if (g.pool && (p->c1_ == nullptr || need_backward_data)) {
    return absl::InvalidArgumentError(
        absl::StrCat("conv2d: a pooled output needs the one-channel direct kernels and no "
                     "backward-data; not available for ",
                     g.DebugString()));
  }
  // The direct kernels do all the work a plan without backward-data has; its
  // oneDNN primitives would never run.
  if (p->c1_ != nullptr && !need_backward_data) return p;
  absl::Status s;
  try {
    s = p->Build(need_backward_data);
  } catch (const dnnl::error& e) {
    s = absl::InternalError(absl::StrCat("oneDNN rejected ", g.DebugString(), ": ", e.what()));
  }
  if (!s.ok()) return s;
  return p;
}

absl::Status Conv2dPlan::Build(bool need_backward_data) {
  const Conv2dGeometry& g = g_;
  dnnl::engine& eng = CpuEngine();
  // oneDNN names dimensions logically (N, C, H, W); the tag gives the layout.
  x_md_ = memory::desc({g.n, g.c, g.h, g.w}, dt::f32, tag::nhwc);
  y_md_ = memory::desc({g.n, g.k, g.oh, g.ow}, dt::f32, tag::nhwc);
  w_plain_md_ = memory::desc({g.k, g.c, g.kh, g.kw}, dt::f32, tag::ohwi);
  b_md_ = g.bias ? memory::desc({g.k}, dt::f32, tag::x) : memory::desc();
  // Letting the primitive pick its weight layout ("any") buys blocked, vector-
  // friendly kernels; the per-step reorder of the (small) weights is cheap.
  // bf16: the primitives read bf16 x, w and dy (rounded into the scratch,
  // or by the weight reorder) and write fp32.
  const dt lp = g.bf16 ? dt::bf16 : dt::f32;
  memory::desc w_any({g.k, g.c, g.kh, g.kw}, lp, tag::any);
  memory::desc dw_any({g.k, g.c, g.kh, g.kw}, dt::f32, tag::any);
  x_lp_md_ = memory::desc({g.n, g.c, g.h, g.w}, lp, tag::nhwc);
  dy_lp_md_ = memory::desc({g.n, g.k, g.oh, g.ow}, lp, tag::nhwc);
  memory::dims strides{g.stride_h, g.stride_w};
  memory::dims pad_l{g.pad_top, g.pad_left};
  memory::dims pad_r{g.pad_bottom, g.pad_right};

  auto fwd_desc = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                  dnnl::algorithm::convolution_direct, x_lp_md_,
                                                  w_any, b_md_, y_md_, strides, pad_l, pad_r);
  dnnl::primitive_attr fwd_attr;
  if (g.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    fwd_attr.set_post_ops(ops);
  }
  auto fwd_pd = dnnl::convolution_forward::primitive_desc(fwd_desc, fwd_attr, eng);
  fwd_ = dnnl::convolution_forward(fwd_pd);

  BindUserMemories();

  if (fwd_pd.weights_desc() != w_plain_md_) {
    fwd_w_reorder_ = true;
    fwd_w_mem_ = memory(fwd_pd.weights_desc(), eng, nullptr);  // in the scratch
    fwd_w_to_ = dnnl::reorder(w_plain_mem_, fwd_w_mem_);
  } else {
    fwd_w_mem_ = w_plain_mem_;
  }
  fwd_args_ = {{DNNL_ARG_SRC, x_lp_mem_}, {DNNL_ARG_WEIGHTS, fwd_w_mem_}, {DNNL_ARG_DST, y_mem_}};
  if (g.bias) fwd_args_[DNNL_ARG_BIAS] = b_mem_;

  has_bwd_data_ = need_backward_data;
  if (g.bf16 && g.kh == 1 && g.kw == 1 && g.stride_h == g.stride_w && g.pad_top == 0 &&
      g.pad_left == 0 && g.pad_bottom == 0 && g.pad_right == 0 && !g.bias &&
      g.oh * g.stride_h == g.h && g.ow * g.stride_w == g.w) {
    BuildMatmulBackward();
    return absl::OkStatus();
  }
  if (need_backward_data) {
    auto bd_desc = dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, x_md_,
                                                         w_any, dy_lp_md_, strides, pad_l, pad_r);
    auto bd_pd = dnnl::convolution_backward_data::primitive_desc(bd_desc, eng, fwd_pd);
    bwd_data_ = dnnl::convolution_backward_data(bd_pd);
    if (bd_pd.weights_desc() == fwd_pd.weights_desc()) {
      // The same layout: reordered again as Forward does, since other
      // layers have used the scratch since this one's Forward.
      bwd_data_w_reorder_ = fwd_w_reorder_;
      bwd_data_w_mem_ = fwd_w_mem_;
      if (fwd_w_reorder_) bwd_data_w_to_ = fwd_w_to_;
    } else if (bd_pd.weights_desc() == w_plain_md_) {
      bwd_data_w_mem_ = w_plain_mem_;
    } else {
      bwd_data_w_reorder_ = true;
      bwd_data_w_mem_ = memory(bd_pd.weights_desc(), eng, nullptr);
      bwd_data_w_to_ = dnnl::reorder(w_plain_mem_, bwd_data_w_mem_);
    }
    bwd_data_args_ = {{DNNL_ARG_DIFF_DST, dy_lp_mem_},
                      {DNNL_ARG_WEIGHTS, bwd_data_w_mem_},
                      {DNNL_ARG_DIFF_SRC, dx_mem_}};
  }

  auto bw_desc =
      g.bias
          ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_lp_md_,
                                                     dw_any, b_md_, dy_lp_md_, strides, pad_l,
                                                     pad_r)
          : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_lp_md_,
                                                     dw_any, dy_lp_md_, strides, pad_l, pad_r);
  auto bw_pd = dnnl::convolution_backward_weights::primitive_desc(bw_desc, eng, fwd_pd);
  // oneDNN 2.6's jit_1x1 backward-weights kernel on AVX-512, for a strided
  // 1x1 convolution of channels-last tensors (its "reduce to unit stride"
  // copy), writes outside its buffers: engine/kernels/cpu/conv_test.cc caught
  // it trampling the heap at 8 -> 16 channels, stride 2, which a narrow
  // ResNet's downsampling shortcut has (AVX2 machines never pick it). Such a
  // convolution takes oneDNN's next implementation instead.
  if (g.kh == 1 && g.kw == 1 && (g.stride_h > 1 || g.stride_w > 1)) {
    while (absl::StrContains(bw_pd.impl_info_str(), "1x1") && bw_pd.next_impl()) {
    }
  }
  bwd_w_ = dnnl::convolution_backward_weights(bw_pd);
  if (bw_pd.diff_weights_desc() != w_plain_md_) {
    dw_reorder_ = true;
    bwd_w_dw_mem_ = memory(bw_pd.diff_weights_desc(), eng, nullptr);  // in the scratch
    dw_from_ = dnnl::reorder(bwd_w_dw_mem_, dw_plain_mem_);
  } else {
    bwd_w_dw_mem_ = dw_plain_mem_;
  }
  bwd_w_args_ = {{DNNL_ARG_SRC, x_lp_mem_},
                 {DNNL_ARG_DIFF_DST, dy_lp_mem_},
                 {DNNL_ARG_DIFF_WEIGHTS, bwd_w_dw_mem_}};
  if (g.bias) bwd_w_args_[DNNL_ARG_DIFF_BIAS] = db_mem_;
  return absl::OkStatus();
}

void Conv2dPlan::BindUserMemories() {
  dnnl::engine& eng = CpuEngine();
  x_mem_ = memory(x_md_, eng, nullptr);
  y_mem_ = memory(y_md_, eng, nullptr);
  w_plain_mem_ = memory(w_plain_md_, eng, nullptr);
  dw_plain_mem_ = memory(w_plain_md_, eng, nullptr);
  dx_mem_ = memory(x_md_, eng, nullptr);
  dy_mem_ = memory(y_md_, eng, nullptr);
  if (g_.bias) {
    b_mem_ = memory(b_md_, eng, nullptr);
    db_mem_ = memory(b_md_, eng, nullptr);
  }
  if (g_.bf16) {
    x_lp_mem_ = memory(x_lp_md_, eng, nullptr);
    dy_lp_mem_ = memory(dy_lp_md_, eng, nullptr);
    x_to_lp_ = dnnl::reorder(x_mem_, x_lp_mem_);
    dy_to_lp_ = dnnl::reorder(dy_mem_, dy_lp_mem_);
  } else {
    x_lp_mem_ = x_mem_;
    dy_lp_mem_ = dy_mem_;
  }
}

void Conv2dPlan::BuildMatmulBackward() {
  const Conv2dGeometry& g = g_;
  dnnl::engine& eng = CpuEngine();
  matmul_backward_ = true;
  const int64_t s = g.stride_h, m = g.n * g.oh * g.ow;
  // The rounded dy in the scratch is (M, K) row-major; read transposed, it
  // is dy^T (K, M). The plain weights (K, 1, 1, C) are (K, C).
  const memory::desc dyt_md({g.k, m}, dt::bf16, {1, g.k});
  const memory::desc x_md({m, g.c}, dt::bf16, tag::ab), dw_md({g.k, g.c}, dt::f32, tag::ab);
  // dx (M, C): with stride 1, dx itself; strided, a dense product in the
  // scratch that x_scatter_ then writes to the pixels the windows read.
  const memory::desc dy_md({m, g.k}, dt::bf16, tag::ab);
  const memory::desc w_plain({g.k, g.c}, dt::f32, tag::ab);
  const memory::desc w_any({g.k, g.c}, dt::bf16, tag::any);
  const memory::desc dx_md({m, g.c}, dt::f32, tag::ab);
  auto data_pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(dy_md, w_any, dx_md), eng);
  auto weights_pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(dyt_md, x_md, dw_md), eng);
  mm_data_ = dnnl::matmul(data_pd);
  mm_weights_ = dnnl::matmul(weights_pd);
  mm_dy_mem_ = memory(dy_md, eng, nullptr);
  mm_dyt_mem_ = memory(dyt_md, eng, nullptr);
  mm_x_mem_ = memory(x_md, eng, nullptr);
  mm_w_plain_mem_ = memory(w_plain, eng, nullptr);
  mm_w_mem_ = memory(data_pd.weights_desc(), eng, nullptr);
  mm_dx_mem_ = memory(dx_md, eng, nullptr);
  mm_dw_mem_ = memory(dw_md, eng, nullptr);
  mm_w_to_ = dnnl::reorder(mm_w_plain_mem_, mm_w_mem_);
  gather_x_ = s > 1;
  if (gather_x_) {
    // The pixels the windows read, as (N, C, OH, OW) over x's memory.
    const memory::desc read({g.n, g.c, g.oh, g.ow}, dt::f32,
                            {g.h * g.w * g.c, 1, s * g.w * g.c, s * g.c});
    x_read_mem_ = memory(read, eng, nullptr);
    x_gathered_mem_ =
        memory(memory::desc({g.n, g.c, g.oh, g.ow}, dt::bf16, tag::nhwc), eng, nullptr);
    x_read_to_lp_ = dnnl::reorder(x_read_mem_, x_gathered_mem_);
    dx_read_mem_ = memory(read, eng, nullptr);
    dx_dense_mem_ = memory(memory::desc({g.n, g.c, g.oh, g.ow}, dt::f32, tag::nhwc), eng, nullptr);
    dx_scatter_ = dnnl::reorder(dx_dense_mem_, dx_read_mem_);
  }
}

void* Conv2dPlan::RoundXRead(const float* x) {
  if (!gather_x_) {
    RoundX(x);
    return x_lp_mem_.get_data_handle();
  }
  void* lp = Scratch().Get(Scratch().x, x_gathered_mem_.get_desc().get_size());
  x_read_mem_.set_data_handle(const_cast<float*>(x));
  x_gathered_mem_.set_data_handle(lp);
  x_read_to_lp_.execute(CpuStream(), x_read_mem_, x_gathered_mem_);
  return lp;
}

namespace {

// oneDNN's C++ API reports failures as exceptions; none may leave the kernel.
template <typename F>
absl::Status DnnlTry(const char* what, const Conv2dGeometry& g, F&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat(what, " failed for ", g.DebugString(), ": ", e.what()));
  } catch (const ScratchExhausted&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": no memory left for the scratch of ", g.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Conv2dPlan::Forward(const float* x, const float* w, const float* b, float* y) {
  if (c1_ != nullptr) {
    c1_->Forward(x, w, b, y);
    return absl::OkStatus();
  }
  return DnnlTry("conv2d forward", g_, [&] {
    dnnl::stream& s = CpuStream();
    rounded_dy_ = nullptr;
    if (g_.bf16) {
      RoundX(x);
    } else {
      x_mem_.set_data_handle(const_cast<float*>(x));
    }
    y_mem_.set_data_handle(y);
    w_plain_mem_.set_data_handle(const_cast<float*>(w));
    if (g_.bias) b_mem_.set_data_handle(const_cast<float*>(b));
    if (fwd_w_reorder_) ReorderWeights(fwd_w_to_, w_plain_mem_, fwd_w_mem_);
    fwd_.execute(s, fwd_args_);
    s.wait();
  });
}

absl::Status Conv2dPlan::BackwardData(const float* dy, const float* w, float* dx) {
  if (!has_bwd_data_) {
    return absl::FailedPreconditionError(
        "conv2d: backward-data requested from a plan built without it");
  }
  return DnnlTry("conv2d backward-data", g_, [&] {
    dnnl::stream& s = CpuStream();
    if (matmul_backward_) {
      RoundDy(dy);  // reuses BackwardWeights' rounding of the same dy
      rounded_dy_ = nullptr;
      mm_dy_mem_.set_data_handle(dy_lp_mem_.get_data_handle());
      mm_w_plain_mem_.set_data_handle(const_cast<float*>(w));
      void* dense = dx;
      if (gather_x_) {
        dense = Scratch().Get(Scratch().x, dx_dense_mem_.get_desc().get_size());
      }
      mm_dx_mem_.set_data_handle(dense);
      ReorderWeights(mm_w_to_, mm_w_plain_mem_, mm_w_mem_);
      mm_data_.execute(
          s,
          {{DNNL_ARG_SRC, mm_dy_mem_}, {DNNL_ARG_WEIGHTS, mm_w_mem_}, {DNNL_ARG_DST, mm_dx_mem_}});
      if (gather_x_) {
        // The pixels no window reads get no gradient.
        std::memset(dx, 0, sizeof(float) * g_.n * g_.h * g_.w * g_.c);
        dx_dense_mem_.set_data_handle(dense);
        dx_read_mem_.set_data_handle(dx);
        dx_scatter_.execute(s, dx_dense_mem_, dx_read_mem_);
      }
      s.wait();
      return;
    }
    if (g_.bf16) {
      RoundDy(dy);  // reuses BackwardWeights' rounding of the same dy
    } else {
      dy_mem_.set_data_handle(const_cast<float*>(dy));
    }
    rounded_dy_ = nullptr;
    dx_mem_.set_data_handle(dx);
    w_plain_mem_.set_data_handle(const_cast<float*>(w));
    if (bwd_data_w_reorder_) ReorderWeights(bwd_data_w_to_, w_plain_mem_, bwd_data_w_mem_);
    bwd_data_.execute(s, bwd_data_args_);
    s.wait();
  });
}

absl::Status Conv2dPlan::BackwardWeights(const float* x, const float* dy, float* dw, float* db) {
  if (c1_ != nullptr) {
    c1_->BackwardWeights(x, dy, dw, db);
    return absl::OkStatus();
  }
  return DnnlTry("conv2d backward-weights", g_, [&] {
    dnnl::stream& s = CpuStream();
    if (matmul_backward_) {
      void* x_read = RoundXRead(x);
      rounded_dy_ = nullptr;  // a BackwardData right after may reuse this rounding
      RoundDy(dy);
      mm_dyt_mem_.set_data_handle(dy_lp_mem_.get_data_handle());
      mm_x_mem_.set_data_handle(x_read);
      mm_dw_mem_.set_data_handle(dw);
      mm_weights_.execute(
          s,
          {{DNNL_ARG_SRC, mm_dyt_mem_}, {DNNL_ARG_WEIGHTS, mm_x_mem_}, {DNNL_ARG_DST, mm_dw_mem_}});
      s.wait();
      return;
    }
    if (g_.bf16) {
      RoundX(x);
      rounded_dy_ = nullptr;  // a BackwardData right after may reuse this rounding
      RoundDy(dy);
    } else {
      x_mem_.set_data_handle(const_cast<float*>(x));
      dy_mem_.set_data_handle(const_cast<float*>(dy));
    }
    dw_plain_mem_.set_data_handle(dw);
    if (g_.bias) db_mem_.set_data_handle(db);
    if (dw_reorder_) {
      ConvScratch& scratch = Scratch();
      bwd_w_dw_mem_.set_data_handle(scratch.Get(scratch.dw, bwd_w_dw_mem_.get_desc().get_size()));
    }
    bwd_w_.execute(s, bwd_w_args_);
    if (dw_reorder_) dw_from_.execute(s, bwd_w_dw_mem_, dw_plain_mem_);
    s.wait();
  });
}

}  // namespace yoke::engine::cpu
