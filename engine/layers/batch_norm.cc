#include "engine/layers/batch_norm.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {

absl::StatusOr<Shape> BatchNormLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  // The shape rules are shared with job validation (engine/shapes/).
  RETURN_IF_ERROR(shapes::BatchNormOutput(inputs).status());
  params_ = params;
  channels_ = inputs[0].back();
  per_example_ = NumElements(inputs[0]);
  gamma_ = params->Declare(name() + "/gamma", {channels_}, Init::Constant(1.0f));
  beta_ = params->Declare(name() + "/beta", {channels_}, Init::Constant(0.0f));
  mean_ = params->DeclareState(name() + "/running_mean", {channels_}, Init::Constant(0.0f));
  var_ = params->DeclareState(name() + "/running_var", {channels_}, Init::Constant(1.0f));
  return inputs[0];
}

absl::StatusOr<BatchNormLayer::Cached*> BatchNormLayer::PlanFor(int64_t n,
                                                                const LayerContext& ctx) {
  // The plan keeps the batch statistics of its Forward for the Backward.
  Cached& c = plans_[StateKey(n, ctx)];
  if (c.plan == nullptr) {
    ASSIGN_OR_RETURN(
        c.plan, cpu::BatchNormPlan::Create(n * (per_example_ / channels_), channels_, epsilon_));
  }
  return &c;
}

absl::Status BatchNormLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                     const LayerContext& ctx) {
  RETURN_IF_ERROR(Normalize(*in[0], out, ctx));
  ApplyRelu(out);
  return absl::OkStatus();
}

void BatchNormLayer::ApplyRelu(Tensor* y) const {
  if (!relu_) return;
  float* __restrict p = y->data<float>();
  const int64_t n = y->numel();
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] > 0.0f ? p[i] : 0.0f;
}

absl::Status BatchNormLayer::Normalize(const Tensor& x, Tensor* out, const LayerContext& ctx) {
  ASSIGN_OR_RETURN(Cached * c, PlanFor(x.dim(0), ctx));
  const float* gamma = params_->value(gamma_).data<float>();
  const float* beta = params_->value(beta_).data<float>();
  float* running_mean = params_->state(mean_).data<float>();
  float* running_var = params_->state(var_).data<float>();
  if (!ctx.training) {
    return c->plan->ForwardInference(x.data<float>(), gamma, beta, running_mean, running_var,
                                     out->data<float>());
  }
  const float* bm;
  const float* bv;
  double m;
  if (ctx.sync_stats != nullptr) {
    if (ctx.activation_set != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          name(),
          ": synchronized batch norm keeps the statistics of one Forward; it cannot run "
          "with several micro-batches in flight (activation set ",
          ctx.activation_set, ")"));
    }
    if (ctx.recompute && static_cast<int64_t>(sync_mean_.size()) == channels_) {
      // Run again in backward: this step's global statistics, kept from its
      // Forward, normalise as ForwardSynced did, with no collective (the
      // other replicas may be elsewhere in their backward).
      return c->plan->ForwardInference(x.data<float>(), gamma, beta, sync_mean_.data(),
                                       sync_var_.data(), out->data<float>());
    }
    RETURN_IF_ERROR(ForwardSynced(x, c, ctx.sync_stats, out->data<float>()));
    bm = sync_mean_.data();
    bv = sync_var_.data();
    m = sync_rows_;
  } else if (ctx.recompute) {
    // Run again in backward (training.recompute and recompute_batch_norm):
    // the plan still holds this step's batch statistics, which its Backward
    // reads, so only the normalising pass runs, and the running statistics
    // were updated by the first Forward.
    return c->plan->ForwardWithBatchStats(x.data<float>(), gamma, beta, out->data<float>());
  } else {
    RETURN_IF_ERROR(c->plan->ForwardTraining(x.data<float>(), gamma, beta, out->data<float>()));
    bm = c->plan->batch_mean();
    bv = c->plan->batch_var();
    m = static_cast<double>(x.numel() / channels_);
  }
  // oneDNN reports the biased variance; the running estimate wants the
  // unbiased one. A single value per channel has no spread to estimate.
  const float unbias = m > 1 ? static_cast<float>(m / (m - 1)) : 1.0f;
  if (ctx.recompute) return absl::OkStatus();  // updated by the first Forward
  for (int64_t j = 0; j < channels_; ++j) {
    running_mean[j] = (1.0f - momentum_) * running_mean[j] + momentum_ * bm[j];
    running_var[j] = (1.0f - momentum_) * running_var[j] + momentum_ * bv[j] * unbias;
  }
  return absl::OkStatus();
}

absl::Status BatchNormLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                      const Tensor& dout, const std::vector<Tensor*>& din,
                                      const LayerContext& ctx) {
  const Tensor& x = *in[0];
  if (ctx.training && ctx.sync_stats != nullptr) {
    return BackwardSynced(x, dout, ctx.sync_stats,
                          din[0] != nullptr ? din[0]->data<float>() : nullptr);
  }
  ASSIGN_OR_RETURN(Cached * c, PlanFor(x.dim(0), ctx));
  Tensor* dx = din[0];
  if (dx == nullptr) {
    if (!c->scratch_dx.defined()) {
      ASSIGN_OR_RETURN(c->scratch_dx,
                       Tensor::Allocate(x.shape(), DType::kF32, Device::CPU(),
                                        absl::StrCat("the input gradient of layer ", name())));
    }
    dx = &c->scratch_dx;
  }
  return c->plan->Backward(
      x.data<float>(), dout.data<float>(), params_->value(gamma_).data<float>(),
      params_->value(beta_).data<float>(), !ctx.training, params_->state(mean_).data<float>(),
      params_->state(var_).data<float>(), dx->data<float>(), params_->grad(gamma_).data<float>(),
      params_->grad(beta_).data<float>());
}

absl::Status BatchNormLayer::ForwardSynced(const Tensor& x, Cached* c, CrossReplicaSum* sum,
                                           float* y) {
  const int64_t rows = x.numel() / channels_, ch = channels_;
  const float* px = x.data<float>();
  std::vector<double> acc(ch, 0.0);
  // Pass 1: per-channel sums and this replica's row count -> global mean.
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = px + r * ch;
    for (int64_t j = 0; j < ch; ++j) acc[j] += row[j];
  }
  sync_buf_.resize(ch + 1);
  for (int64_t j = 0; j < ch; ++j) sync_buf_[j] = static_cast<float>(acc[j]);
  sync_buf_[ch] = static_cast<float>(rows);  // exact below 2^24 rows per step
  RETURN_IF_ERROR(sum->SumInPlace(sync_buf_.data(), ch + 1, name() + " forward sums"));
  sync_rows_ = sync_buf_[ch];
  if (sync_rows_ < 1) {
    return absl::InternalError(absl::StrCat(name(), ": the replicas' row counts sum to ",
                                            sync_rows_, " (a replica sent a bad count)"));
  }
  sync_mean_.resize(ch);
  for (int64_t j = 0; j < ch; ++j) sync_mean_[j] = static_cast<float>(sync_buf_[j] / sync_rows_);
  // Pass 2: centred squares around the global mean -> global biased variance.
  std::fill(acc.begin(), acc.end(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = px + r * ch;
    for (int64_t j = 0; j < ch; ++j) {
      const double d = row[j] - sync_mean_[j];
      acc[j] += d * d;
    }
  }
  for (int64_t j = 0; j < ch; ++j) sync_buf_[j] = static_cast<float>(acc[j]);
  RETURN_IF_ERROR(sum->SumInPlace(sync_buf_.data(), ch, name() + " forward variances"));
  sync_var_.resize(ch);
  for (int64_t j = 0; j < ch; ++j) sync_var_[j] = static_cast<float>(sync_buf_[j] / sync_rows_);
  // Normalising with given statistics is oneDNN's inference primitive.
  return c->plan->ForwardInference(px, params_->value(gamma_).data<float>(),
                                   params_->value(beta_).data<float>(), sync_mean_.data(),
                                   sync_var_.data(), y);
}

absl::Status BatchNormLayer::BackwardSynced(const Tensor& x, const Tensor& dy, CrossReplicaSum* sum,
                                            float* dx) {
  const int64_t rows = x.numel() / channels_, ch = channels_;
  if (static_cast<int64_t>(sync_mean_.size()) != ch) {
    return absl::FailedPreconditionError(
        absl::StrCat(name(), ": synchronized Backward without a synchronized Forward"));
  }
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  std::vector<float> invstd(ch);
  for (int64_t j = 0; j < ch; ++j) invstd[j] = 1.0f / std::sqrt(sync_var_[j] + epsilon_);
  // This replica's sum(dy) and sum(dy * xhat): its dbeta and dgamma.
  std::vector<double> sdy(ch, 0.0), sdyx(ch, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * ch;
    const float* dr = pdy + r * ch;
    for (int64_t j = 0; j < ch; ++j) {
      const double xhat = (xr[j] - sync_mean_[j]) * invstd[j];
      sdy[j] += dr[j];
      sdyx[j] += dr[j] * xhat;
    }
  }
  float* dgamma = params_->grad(gamma_).data<float>();
  float* dbeta = params_->grad(beta_).data<float>();
  sync_buf_.resize(2 * ch);
  for (int64_t j = 0; j < ch; ++j) {
    dbeta[j] = sync_buf_[j] = static_cast<float>(sdy[j]);
    dgamma[j] = sync_buf_[ch + j] = static_cast<float>(sdyx[j]);
  }
  // Every replica takes part in the sums, whether or not it wants dx.
  RETURN_IF_ERROR(sum->SumInPlace(sync_buf_.data(), 2 * ch, name() + " backward sums"));
  if (dx == nullptr) return absl::OkStatus();
  const float* gamma = params_->value(gamma_).data<float>();
  const double total = sync_rows_;
  std::vector<float> scale(ch), mean_dy(ch), mean_dyx(ch);
  for (int64_t j = 0; j < ch; ++j) {
    scale[j] = gamma[j] * invstd[j];
    mean_dy[j] = static_cast<float>(sync_buf_[j] / total);
    mean_dyx[j] = static_cast<float>(sync_buf_[ch + j] / total);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = px + r * ch;
    const float* dr = pdy + r * ch;
    float* out = dx + r * ch;
    for (int64_t j = 0; j < ch; ++j) {
      const float xhat = (xr[j] - sync_mean_[j]) * invstd[j];
      out[j] = scale[j] * (dr[j] - mean_dy[j] - xhat * mean_dyx[j]);
    }
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<std::unique_ptr<Layer>> MakeBatchNorm(const v1::LayerSpec& spec) {
  const v1::BatchNormSpec& b = spec.batch_norm();
  RETURN_IF_ERROR(CheckArguments(spec));
  return std::unique_ptr<Layer>(
      new BatchNormLayer(shapes::BatchNormMomentum(b), shapes::BatchNormEpsilon(b)));
}

}  // namespace

YOKE_REGISTER_LAYER("batch_norm", MakeBatchNorm);

}  // namespace yoke::engine
