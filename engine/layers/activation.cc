#include "engine/layers/activation.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// y[i] = f(x[i]) over n elements.
template <typename F>
void Map(const float* __restrict x, float* __restrict y, int64_t n, F f) {
#pragma omp parallel for simd if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

// dx[i] = g(a[i], dy[i]) over n elements, `a` being x or y as g needs.
template <typename G>
void Map2(const float* __restrict a, const float* __restrict dy, float* __restrict dx, int64_t n,
          G g) {
#pragma omp parallel for simd if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) dx[i] = g(a[i], dy[i]);
}

}  // namespace

const char* ActivationLayer::type() const {
  switch (kind_) {
    case Kind::kRelu:
      return "relu";
    case Kind::kLeakyRelu:
      return "leaky_relu";
    case Kind::kSigmoid:
      return "sigmoid";
    case Kind::kTanh:
      return "tanh";
    case Kind::kGelu:
      return "gelu";
  }
  return "activation";
}

absl::StatusOr<Shape> ActivationLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  // The shape rules are shared with job validation (engine/shapes/).
  return shapes::ElementwiseOutput(type(), inputs);
}

absl::Status ActivationLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                      const LayerContext& ctx) {
  const float* x = in[0]->data<float>();
  float* y = out->data<float>();
  const int64_t n = in[0]->numel();
  switch (kind_) {
    case Kind::kRelu:
      Map(x, y, n, [](float v) { return v > 0.0f ? v : 0.0f; });
      break;
    case Kind::kLeakyRelu: {
      const float a = alpha_;
      Map(x, y, n, [a](float v) { return v > 0.0f ? v : a * v; });
      break;
    }
    case Kind::kSigmoid:
      // exp(-v) overflowing to inf for v << 0 still gives the right limit 0.
      Map(x, y, n, [](float v) { return 1.0f / (1.0f + std::exp(-v)); });
      break;
    case Kind::kTanh:
      Map(x, y, n, [](float v) { return std::tanh(v); });
      break;
    case Kind::kGelu:
      Map(x, y, n, [](float v) { return 0.5f * v * (1.0f + std::erf(v * kInvSqrt2)); });
      break;
  }
  return absl::OkStatus();
}

absl::Status ActivationLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                       const Tensor& dout, const std::vector<Tensor*>& din,
                                       const LayerContext& ctx) {
  if (din[0] == nullptr) return absl::OkStatus();
  const float* x = in[0]->data<float>();
  const float* y = out.data<float>();
  const float* dy = dout.data<float>();
  float* dx = din[0]->data<float>();
  const int64_t n = dout.numel();
  switch (kind_) {
    case Kind::kRelu:
      Map2(y, dy, dx, n, [](float yv, float g) { return yv > 0.0f ? g : 0.0f; });
      break;
    case Kind::kLeakyRelu: {
      // From x, not y: a negative alpha would flip y's sign test.
      const float a = alpha_;
      Map2(x, dy, dx, n, [a](float xv, float g) { return xv > 0.0f ? g : a * g; });
      break;
    }
    case Kind::kSigmoid:
      Map2(y, dy, dx, n, [](float yv, float g) { return g * yv * (1.0f - yv); });
      break;
    case Kind::kTanh:
      Map2(y, dy, dx, n, [](float yv, float g) { return g * (1.0f - yv * yv); });
      break;
    case Kind::kGelu:
      // d/dx [x Phi(x)] = Phi(x) + x phi(x)
      Map2(x, dy, dx, n, [](float xv, float g) {
        float cdf = 0.5f * (1.0f + std::erf(xv * kInvSqrt2));
        float pdf = kInvSqrt2Pi * std::exp(-0.5f * xv * xv);
        return g * (cdf + xv * pdf);
      });
      break;
  }
  return absl::OkStatus();
}

namespace {

template <ActivationLayer::Kind K>
absl::StatusOr<std::unique_ptr<Layer>> MakeSimple(const v1::LayerSpec&) {
  return std::unique_ptr<Layer>(new ActivationLayer(K));
}

absl::StatusOr<std::unique_ptr<Layer>> MakeLeakyRelu(const v1::LayerSpec& spec) {
  RETURN_IF_ERROR(CheckArguments(spec));
  // proto3 cannot tell "unset" from 0; 0 would be plain relu, which has its
  // own layer, so 0 means the default.
  return std::unique_ptr<Layer>(new ActivationLayer(ActivationLayer::Kind::kLeakyRelu,
                                                    shapes::LeakyReluAlpha(spec.leaky_relu())));
}

}  // namespace

YOKE_REGISTER_LAYER("relu", MakeSimple<ActivationLayer::Kind::kRelu>);
YOKE_REGISTER_LAYER("leaky_relu", MakeLeakyRelu);
YOKE_REGISTER_LAYER("sigmoid", MakeSimple<ActivationLayer::Kind::kSigmoid>);
YOKE_REGISTER_LAYER("tanh", MakeSimple<ActivationLayer::Kind::kTanh>);
YOKE_REGISTER_LAYER("gelu", MakeSimple<ActivationLayer::Kind::kGelu>);

}  // namespace yoke::engine
