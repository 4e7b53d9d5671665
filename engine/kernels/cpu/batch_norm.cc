#include "engine/kernels/cpu/batch_norm.h"

#include "absl/strings/str_cat.h"
#include "engine/kernels/cpu/dnnl_context.h"

namespace yoke::engine::cpu {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using flags = dnnl::normalization_flags;

namespace {

// oneDNN's C++ API reports failures as exceptions; none may leave the kernel.
template <typename F>
absl::Status DnnlTry(const char* what, int64_t rows, int64_t channels, F&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat(what, " failed for (", rows, ", ", channels, "): ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<BatchNormPlan>> BatchNormPlan::Create(int64_t rows, int64_t channels,
                                                                     float epsilon) {
  std::unique_ptr<BatchNormPlan> p(new BatchNormPlan());
  p->rows_ = rows;
  p->channels_ = channels;
  p->epsilon_ = epsilon;
  absl::Status s = DnnlTry("building batch_norm", rows, channels, [&] { p->Build(); });
  if (!s.ok()) return s;
  return p;
}

void BatchNormPlan::Build() {
  dnnl::engine& eng = CpuEngine();
  // (M, C) rows described as an (M, C, 1, 1) channels-last image, the layout
  // oneDNN's vectorised batch-norm kernels handle.
  memory::desc md({rows_, channels_, 1, 1}, dt::f32, tag::nhwc);
  memory::desc cmd({channels_}, dt::f32, tag::x);
  const flags ss = flags::use_scale | flags::use_shift;
  const flags gss = ss | flags::use_global_stats;

  auto train_pd = dnnl::batch_normalization_forward::primitive_desc(
      {dnnl::prop_kind::forward_training, md, epsilon_, ss}, eng);
  auto infer_pd = dnnl::batch_normalization_forward::primitive_desc(
      {dnnl::prop_kind::forward_training, md, epsilon_, gss}, eng);
  auto bwd_pd = dnnl::batch_normalization_backward::primitive_desc(
      {dnnl::prop_kind::backward, md, md, epsilon_, ss}, eng, train_pd);
  auto bwd_global_pd = dnnl::batch_normalization_backward::primitive_desc(
      {dnnl::prop_kind::backward, md, md, epsilon_, gss}, eng, infer_pd);
  fwd_train_ = dnnl::batch_normalization_forward(train_pd);
  fwd_infer_ = dnnl::batch_normalization_forward(infer_pd);
  bwd_ = dnnl::batch_normalization_backward(bwd_pd);
  bwd_global_ = dnnl::batch_normalization_backward(bwd_global_pd);

  x_ = memory(md, eng, nullptr);
  y_ = memory(md, eng, nullptr);
  dx_ = memory(md, eng, nullptr);
  dy_ = memory(md, eng, nullptr);
  gamma_ = memory(cmd, eng, nullptr);
  beta_ = memory(cmd, eng, nullptr);
  dgamma_ = memory(cmd, eng, nullptr);
  dbeta_ = memory(cmd, eng, nullptr);
  ext_mean_ = memory(cmd, eng, nullptr);
  ext_var_ = memory(cmd, eng, nullptr);
  mean_ = memory(cmd, eng);
  var_ = memory(cmd, eng);

  train_args_ = {{DNNL_ARG_SRC, x_},      {DNNL_ARG_DST, y_},     {DNNL_ARG_SCALE, gamma_},
                 {DNNL_ARG_SHIFT, beta_}, {DNNL_ARG_MEAN, mean_}, {DNNL_ARG_VARIANCE, var_}};
  infer_args_ = {{DNNL_ARG_SRC, x_},         {DNNL_ARG_DST, y_},
                 {DNNL_ARG_SCALE, gamma_},   {DNNL_ARG_SHIFT, beta_},
                 {DNNL_ARG_MEAN, ext_mean_}, {DNNL_ARG_VARIANCE, ext_var_}};
  bwd_args_ = {
      {DNNL_ARG_SRC, x_},        {DNNL_ARG_DIFF_DST, dy_},       {DNNL_ARG_MEAN, mean_},
      {DNNL_ARG_VARIANCE, var_}, {DNNL_ARG_SCALE, gamma_},       {DNNL_ARG_SHIFT, beta_},
      {DNNL_ARG_DIFF_SRC, dx_},  {DNNL_ARG_DIFF_SCALE, dgamma_}, {DNNL_ARG_DIFF_SHIFT, dbeta_}};
  bwd_global_args_ = bwd_args_;
  bwd_global_args_[DNNL_ARG_MEAN] = ext_mean_;
  bwd_global_args_[DNNL_ARG_VARIANCE] = ext_var_;
}

absl::Status BatchNormPlan::ForwardTraining(const float* x, const float* gamma, const float* beta,
                                            float* y) {
  return DnnlTry("batch_norm forward", rows_, channels_, [&] {
    dnnl::stream& s = CpuStream();
    x_.set_data_handle(const_cast<float*>(x));
    y_.set_data_handle(y);
    gamma_.set_data_handle(const_cast<float*>(gamma));
    beta_.set_data_handle(const_cast<float*>(beta));
    fwd_train_.execute(s, train_args_);
    s.wait();
  });
}

absl::Status BatchNormPlan::ForwardInference(const float* x, const float* gamma, const float* beta,
                                             const float* mean, const float* var, float* y) {
  return DnnlTry("batch_norm inference", rows_, channels_, [&] {
    dnnl::stream& s = CpuStream();
    x_.set_data_handle(const_cast<float*>(x));
    y_.set_data_handle(y);
    gamma_.set_data_handle(const_cast<float*>(gamma));
    beta_.set_data_handle(const_cast<float*>(beta));
    ext_mean_.set_data_handle(const_cast<float*>(mean));
    ext_var_.set_data_handle(const_cast<float*>(var));
    fwd_infer_.execute(s, infer_args_);
    s.wait();
  });
}

absl::Status BatchNormPlan::ForwardWithBatchStats(const float* x, const float* gamma,
                                                  const float* beta, float* y) {
  return ForwardInference(x, gamma, beta, batch_mean(), batch_var(), y);
}

absl::Status BatchNormPlan::Backward(const float* x, const float* dy, const float* gamma,
                                     const float* beta, bool global_stats, const float* mean,
                                     const float* var, float* dx, float* dgamma, float* dbeta) {
  return DnnlTry("batch_norm backward", rows_, channels_, [&] {
    dnnl::stream& s = CpuStream();
    x_.set_data_handle(const_cast<float*>(x));
    dy_.set_data_handle(const_cast<float*>(dy));
    gamma_.set_data_handle(const_cast<float*>(gamma));
    beta_.set_data_handle(const_cast<float*>(beta));
    dx_.set_data_handle(dx);
    dgamma_.set_data_handle(dgamma);
    dbeta_.set_data_handle(dbeta);
    if (global_stats) {
      ext_mean_.set_data_handle(const_cast<float*>(mean));
      ext_var_.set_data_handle(const_cast<float*>(var));
      bwd_global_.execute(s, bwd_global_args_);
    } else {
      bwd_.execute(s, bwd_args_);
    }
    s.wait();
  });
}

const float* BatchNormPlan::batch_mean() const {
  return static_cast<const float*>(mean_.get_data_handle());
}
const float* BatchNormPlan::batch_var() const {
  return static_cast<const float*>(var_.get_data_handle());
}

}  // namespace yoke::engine::cpu
