#include "engine/layers/pool2d.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cpu/padding.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {

absl::StatusOr<Shape> Pool2dLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  // The shape rules are shared with job validation (engine/shapes/).
  RETURN_IF_ERROR(shapes::Pool2dOutput(type(), inputs, {size_, stride_, same_}).status());
  const Shape& s = inputs[0];
  cpu::Padding1d ph = cpu::ComputePadding(s[0], size_, stride_, same_);
  cpu::Padding1d pw = cpu::ComputePadding(s[1], size_, stride_, same_);
  geom_.max = max_;
  geom_.h = s[0];
  geom_.w = s[1];
  geom_.c = s[2];
  geom_.kh = geom_.kw = size_;
  geom_.stride_h = geom_.stride_w = stride_;
  geom_.pad_top = ph.before;
  geom_.pad_bottom = ph.after;
  geom_.pad_left = pw.before;
  geom_.pad_right = pw.after;
  geom_.oh = ph.out;
  geom_.ow = pw.out;
  return Shape{ph.out, pw.out, s[2]};
}

absl::Status Pool2dLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                  const LayerContext& ctx) {
  const Tensor& x = *in[0];
  std::unique_ptr<cpu::Pool2dPlan>& plan = plans_[StateKey(x.dim(0), ctx)];
  if (plan == nullptr) {
    cpu::Pool2dGeometry g = geom_;
    g.n = x.dim(0);
    ASSIGN_OR_RETURN(plan, cpu::Pool2dPlan::Create(g));
  }
  return plan->Forward(x.data<float>(), out->data<float>());
}

bool Pool2dLayer::IsTiledMaxPool2x2() const {
  return max_ && geom_.kh == 2 && geom_.kw == 2 && geom_.stride_h == 2 && geom_.stride_w == 2 &&
         geom_.pad_top == 0 && geom_.pad_left == 0 && geom_.pad_bottom == 0 && geom_.pad_right == 0;
}

bool Pool2dLayer::FuseReluBackward() {
  relu_backward_ = max_;
  return relu_backward_;
}

absl::Status Pool2dLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                   const Tensor& dout, const std::vector<Tensor*>& din,
                                   const LayerContext& ctx) {
  if (din[0] == nullptr) return absl::OkStatus();
  auto it = plans_.find(StateKey(in[0]->dim(0), ctx));
  if (it == plans_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(type(), ": Backward without a Forward of batch ", in[0]->dim(0),
                     " (activation set ", ctx.activation_set, ")"));
  }
  if (relu_backward_) {
    return it->second->BackwardThroughRelu(in[0]->data<float>(), out.data<float>(),
                                           dout.data<float>(), din[0]->data<float>());
  }
  return it->second->Backward(dout.data<float>(), din[0]->data<float>());
}

namespace {

absl::StatusOr<std::unique_ptr<Layer>> MakePool(const v1::LayerSpec& spec, bool max,
                                                const v1::Pool2dSpec& p) {
  RETURN_IF_ERROR(CheckArguments(spec));
  const shapes::Window w = shapes::Pool2dWindow(p);
  return std::unique_ptr<Layer>(new Pool2dLayer(max, w.size, w.stride, w.same));
}

absl::StatusOr<std::unique_ptr<Layer>> MakeMaxPool(const v1::LayerSpec& spec) {
  return MakePool(spec, true, spec.max_pool2d());
}
absl::StatusOr<std::unique_ptr<Layer>> MakeAvgPool(const v1::LayerSpec& spec) {
  return MakePool(spec, false, spec.avg_pool2d());
}

}  // namespace

YOKE_REGISTER_LAYER("max_pool2d", MakeMaxPool);
YOKE_REGISTER_LAYER("avg_pool2d", MakeAvgPool);

}  // namespace yoke::engine
