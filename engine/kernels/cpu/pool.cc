#include "engine/kernels/cpu/pool.h"

#include "absl/strings/str_cat.h"
#include "engine/kernels/cpu/dnnl_context.h"

namespace yoke::cpu {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

std::string Pool2dGeometry::DebugString() const {
  return absl::StrCat(max ? "max" : "avg", " pool x(", n, ",", h, ",", w, ",", c,
                      ") window ", kh, "x", kw, " stride ", stride_h, "x", stride_w,
                      " pad t", pad_top, " l", pad_left, " b", pad_bottom, " r",
                      pad_right, " -> (", oh, ",", ow, ")");
}

namespace {

// oneDNN's C++ API reports failures as exceptions; none may leave the kernel.
template <typename F>
absl::Status DnnlTry(const char* what, const Pool2dGeometry& g, F&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat(what, " failed for ", g.DebugString(), ": ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pool2dPlan>> Pool2dPlan::Create(const Pool2dGeometry& g) {
  std::unique_ptr<Pool2dPlan> p(new Pool2dPlan());
  p->g_ = g;
  absl::Status s = DnnlTry("building pooling", g, [&] { p->Build(); });
  if (!s.ok()) return s;
  return p;
}

void Pool2dPlan::Build() {
  const Pool2dGeometry& g = g_;
  dnnl::engine& eng = CpuEngine();
  memory::desc x_md({g.n, g.c, g.h, g.w}, dt::f32, tag::nhwc);
  memory::desc y_md({g.n, g.c, g.oh, g.ow}, dt::f32, tag::nhwc);
  const dnnl::algorithm alg = g.max ? dnnl::algorithm::pooling_max
                                    : dnnl::algorithm::pooling_avg_exclude_padding;
  memory::dims strides{g.stride_h, g.stride_w}, kernel{g.kh, g.kw};
  memory::dims pad_l{g.pad_top, g.pad_left}, pad_r{g.pad_bottom, g.pad_right};
  auto fwd_pd = dnnl::pooling_forward::primitive_desc(
      dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, alg, x_md, y_md,
                                  strides, kernel, pad_l, pad_r),
      eng);
  auto bwd_pd = dnnl::pooling_backward::primitive_desc(
      dnnl::pooling_backward::desc(alg, x_md, y_md, strides, kernel, pad_l, pad_r), eng,
      fwd_pd);
  fwd_ = dnnl::pooling_forward(fwd_pd);
  bwd_ = dnnl::pooling_backward(bwd_pd);
  x_mem_ = memory(x_md, eng, nullptr);
  y_mem_ = memory(y_md, eng, nullptr);
  dx_mem_ = memory(x_md, eng, nullptr);
  dy_mem_ = memory(y_md, eng, nullptr);
  fwd_args_ = {{DNNL_ARG_SRC, x_mem_}, {DNNL_ARG_DST, y_mem_}};
  bwd_args_ = {{DNNL_ARG_DIFF_DST, dy_mem_}, {DNNL_ARG_DIFF_SRC, dx_mem_}};
  if (fwd_pd.workspace_desc().get_size() > 0) {
    ws_mem_ = memory(fwd_pd.workspace_desc(), eng);
    fwd_args_[DNNL_ARG_WORKSPACE] = ws_mem_;
    bwd_args_[DNNL_ARG_WORKSPACE] = ws_mem_;
  }
}

absl::Status Pool2dPlan::Forward(const float* x, float* y) {
  return DnnlTry("pooling forward", g_, [&] {
    dnnl::stream& s = CpuStream();
    x_mem_.set_data_handle(const_cast<float*>(x));
    y_mem_.set_data_handle(y);
    fwd_.execute(s, fwd_args_);
    s.wait();
  });
}

absl::Status Pool2dPlan::Backward(const float* dy, float* dx) {
  return DnnlTry("pooling backward", g_, [&] {
    dnnl::stream& s = CpuStream();
    dy_mem_.set_data_handle(const_cast<float*>(dy));
    dx_mem_.set_data_handle(dx);
    bwd_.execute(s, bwd_args_);
    s.wait();
  });
}

}  // namespace yoke::cpu
