#include "engine/layers/conv2d.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cpu/conv_c1.h"
#include "engine/kernels/cpu/padding.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {

absl::StatusOr<Shape> Conv2dLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  // The shape rules are shared with job validation (engine/shapes/).
  RETURN_IF_ERROR(shapes::Conv2dOutput(inputs, filters_, {kernel_, stride_, same_}).status());
  const Shape& s = inputs[0];
  cpu::Padding1d ph = cpu::ComputePadding(s[0], kernel_, stride_, same_);
  cpu::Padding1d pw = cpu::ComputePadding(s[1], kernel_, stride_, same_);
  geom_.h = s[0];
  geom_.w = s[1];
  geom_.c = s[2];
  geom_.k = filters_;
  geom_.kh = geom_.kw = kernel_;
  geom_.stride_h = geom_.stride_w = stride_;
  geom_.pad_top = ph.before;
  geom_.pad_bottom = ph.after;
  geom_.pad_left = pw.before;
  geom_.pad_right = pw.after;
  geom_.oh = ph.out;
  geom_.ow = pw.out;
  geom_.bias = bias_;

  params_ = params;
  const float bound = 1.0f / std::sqrt(static_cast<float>(geom_.c * kernel_ * kernel_));
  w_ = params->Declare(name() + "/kernel", {filters_, kernel_, kernel_, geom_.c},
                       Init::Uniform(bound));
  if (bias_) b_ = params->Declare(name() + "/bias", {filters_}, Init::Uniform(bound));
  return Shape{ph.out, pw.out, filters_};
}

int64_t Conv2dLayer::ForwardMacsPerExample() const {
  return geom_.oh * geom_.ow * geom_.k * geom_.kh * geom_.kw * geom_.c;
}

bool Conv2dLayer::FuseRelu() {
  geom_.relu = true;
  plans_.clear();
  return true;
}

bool Conv2dLayer::AbsorbMaxPool2x2() {
  cpu::Conv2dGeometry g = geom_;
  g.n = 1;
  g.pool = true;
  if (!g.relu || !cpu::SingleChannelConv::Supported(g)) return false;
  geom_.pool = true;
  plans_.clear();
  return true;
}

bool Conv2dLayer::UseBf16(bool on) {
  if (geom_.bf16 != on) plans_.clear();
  geom_.bf16 = on;
  // One input channel: the direct kernels run it in fp32 (Conv2dGeometry::bf16).
  cpu::Conv2dGeometry g = geom_;
  g.n = 1;
  return on && !cpu::SingleChannelConv::Supported(g);
}

absl::StatusOr<cpu::Conv2dPlan*> Conv2dLayer::PlanFor(int64_t n, bool backward_data) {
  CachedPlan& c = plans_[n];
  if (c.plan == nullptr || (backward_data && !c.backward_data)) {
    cpu::Conv2dGeometry g = geom_;
    g.n = n;
    ASSIGN_OR_RETURN(c.plan, cpu::Conv2dPlan::Create(g, backward_data));
    c.backward_data = backward_data;
  }
  return c.plan.get();
}

absl::Status Conv2dLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                  const LayerContext& ctx) {
  const Tensor& x = *in[0];
  // Backward adds backward-data to the plan the first time it needs dx; the
  // layer reading the model input never does.
  ASSIGN_OR_RETURN(cpu::Conv2dPlan * plan, PlanFor(x.dim(0), false));
  return plan->Forward(x.data<float>(), params_->value(w_).data<float>(),
                       bias_ ? params_->value(b_).data<float>() : nullptr, out->data<float>());
}

absl::Status Conv2dLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                   const Tensor& dout, const std::vector<Tensor*>& din,
                                   const LayerContext& ctx) {
  const Tensor& x = *in[0];
  ASSIGN_OR_RETURN(cpu::Conv2dPlan * plan, PlanFor(x.dim(0), din[0] != nullptr));
  RETURN_IF_ERROR(plan->BackwardWeights(x.data<float>(), dout.data<float>(),
                                        params_->grad(w_).data<float>(),
                                        bias_ ? params_->grad(b_).data<float>() : nullptr));
  if (din[0] != nullptr) {
    RETURN_IF_ERROR(plan->BackwardData(dout.data<float>(), params_->value(w_).data<float>(),
                                       din[0]->data<float>()));
  }
  return absl::OkStatus();
}

namespace {

absl::StatusOr<std::unique_ptr<Layer>> MakeConv2d(const v1::LayerSpec& spec) {
  const v1::Conv2dSpec& c = spec.conv2d();
  RETURN_IF_ERROR(CheckArguments(spec));
  const shapes::Window w = shapes::Conv2dWindow(c);
  return std::unique_ptr<Layer>(
      new Conv2dLayer(c.filters(), w.size, w.stride, w.same, !c.no_bias()));
}

}  // namespace

YOKE_REGISTER_LAYER("conv2d", MakeConv2d);

}  // namespace yoke::engine
