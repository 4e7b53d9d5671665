#include "engine/kernels/cpu/conv.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
                      pool ? " +maxpool2x2" : "");
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
  memory::desc w_any({g.k, g.c, g.kh, g.kw}, dt::f32, tag::any);
  memory::dims strides{g.stride_h, g.stride_w};
  memory::dims pad_l{g.pad_top, g.pad_left};
  memory::dims pad_r{g.pad_bottom, g.pad_right};

  auto fwd_desc = dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                  dnnl::algorithm::convolution_direct, x_md_, w_any,
                                                  b_md_, y_md_, strides, pad_l, pad_r);
  dnnl::primitive_attr fwd_attr;
  if (g.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    fwd_attr.set_post_ops(ops);
  }
  auto fwd_pd = dnnl::convolution_forward::primitive_desc(fwd_desc, fwd_attr, eng);
  fwd_ = dnnl::convolution_forward(fwd_pd);

  x_mem_ = memory(x_md_, eng, nullptr);
  y_mem_ = memory(y_md_, eng, nullptr);
  w_plain_mem_ = memory(w_plain_md_, eng, nullptr);
  dw_plain_mem_ = memory(w_plain_md_, eng, nullptr);
  dx_mem_ = memory(x_md_, eng, nullptr);
  dy_mem_ = memory(y_md_, eng, nullptr);
  if (g.bias) {
    b_mem_ = memory(b_md_, eng, nullptr);
    db_mem_ = memory(b_md_, eng, nullptr);
  }

  if (fwd_pd.weights_desc() != w_plain_md_) {
    fwd_w_reorder_ = true;
    fwd_w_mem_ = memory(fwd_pd.weights_desc(), eng);
    fwd_w_to_ = dnnl::reorder(w_plain_mem_, fwd_w_mem_);
  } else {
    fwd_w_mem_ = w_plain_mem_;
  }
  fwd_args_ = {{DNNL_ARG_SRC, x_mem_}, {DNNL_ARG_WEIGHTS, fwd_w_mem_}, {DNNL_ARG_DST, y_mem_}};
  if (g.bias) fwd_args_[DNNL_ARG_BIAS] = b_mem_;

  has_bwd_data_ = need_backward_data;
  if (need_backward_data) {
    auto bd_desc = dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, x_md_,
                                                         w_any, y_md_, strides, pad_l, pad_r);
    auto bd_pd = dnnl::convolution_backward_data::primitive_desc(bd_desc, eng, fwd_pd);
    bwd_data_ = dnnl::convolution_backward_data(bd_pd);
    if (bd_pd.weights_desc() == fwd_pd.weights_desc()) {
      bwd_data_w_shared_ = true;
      bwd_data_w_mem_ = fwd_w_mem_;
    } else if (bd_pd.weights_desc() == w_plain_md_) {
      bwd_data_w_mem_ = w_plain_mem_;
    } else {
      bwd_data_w_reorder_ = true;
      bwd_data_w_mem_ = memory(bd_pd.weights_desc(), eng);
      bwd_data_w_to_ = dnnl::reorder(w_plain_mem_, bwd_data_w_mem_);
    }
    bwd_data_args_ = {{DNNL_ARG_DIFF_DST, dy_mem_},
                      {DNNL_ARG_WEIGHTS, bwd_data_w_mem_},
                      {DNNL_ARG_DIFF_SRC, dx_mem_}};
  }

  auto bw_desc =
      g.bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_md_,
                                                        w_any, b_md_, y_md_, strides, pad_l, pad_r)
             : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_md_,
                                                        w_any, y_md_, strides, pad_l, pad_r);
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
    bwd_w_dw_mem_ = memory(bw_pd.diff_weights_desc(), eng);
    dw_from_ = dnnl::reorder(bwd_w_dw_mem_, dw_plain_mem_);
  } else {
    bwd_w_dw_mem_ = dw_plain_mem_;
  }
  bwd_w_args_ = {
      {DNNL_ARG_SRC, x_mem_}, {DNNL_ARG_DIFF_DST, dy_mem_}, {DNNL_ARG_DIFF_WEIGHTS, bwd_w_dw_mem_}};
  if (g.bias) bwd_w_args_[DNNL_ARG_DIFF_BIAS] = db_mem_;
  return absl::OkStatus();
}

namespace {

// oneDNN's C++ API reports failures as exceptions; none may leave the kernel.
template <typename F>
absl::Status DnnlTry(const char* what, const Conv2dGeometry& g, F&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat(what, " failed for ", g.DebugString(), ": ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Conv2dPlan::Forward(const float* x, const float* w, const float* b, float* y) {
  if (c1_ != nullptr) {
    c1_->Forward(x, w, b, y);
    fwd_w_fresh_ = false;  // no reordered copy for BackwardData to reuse
    return absl::OkStatus();
  }
  return DnnlTry("conv2d forward", g_, [&] {
    dnnl::stream& s = CpuStream();
    x_mem_.set_data_handle(const_cast<float*>(x));
    y_mem_.set_data_handle(y);
    w_plain_mem_.set_data_handle(const_cast<float*>(w));
    if (g_.bias) b_mem_.set_data_handle(const_cast<float*>(b));
    if (fwd_w_reorder_) fwd_w_to_.execute(s, w_plain_mem_, fwd_w_mem_);
    fwd_w_fresh_ = true;
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
    dy_mem_.set_data_handle(const_cast<float*>(dy));
    dx_mem_.set_data_handle(dx);
    w_plain_mem_.set_data_handle(const_cast<float*>(w));
    if (bwd_data_w_reorder_) bwd_data_w_to_.execute(s, w_plain_mem_, bwd_data_w_mem_);
    // A plan built after the step's Forward has no reordered copy yet.
    if (bwd_data_w_shared_ && fwd_w_reorder_ && !fwd_w_fresh_) {
      fwd_w_to_.execute(s, w_plain_mem_, fwd_w_mem_);
    }
    fwd_w_fresh_ = false;
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
    x_mem_.set_data_handle(const_cast<float*>(x));
    dy_mem_.set_data_handle(const_cast<float*>(dy));
    dw_plain_mem_.set_data_handle(dw);
    if (g_.bias) db_mem_.set_data_handle(db);
    bwd_w_.execute(s, bwd_w_args_);
    if (dw_reorder_) dw_from_.execute(s, bwd_w_dw_mem_, dw_plain_mem_);
    s.wait();
  });
}

}  // namespace yoke::engine::cpu
