#include "engine/layers/global_avg_pool.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {

absl::StatusOr<Shape> GlobalAvgPoolLayer::Build(const std::vector<Shape>& inputs,
                                                ParamSet* params) {
  // The shape rules are shared with job validation (engine/shapes/).
  RETURN_IF_ERROR(shapes::GlobalAvgPoolOutput(inputs).status());
  hw_ = inputs[0][0] * inputs[0][1];
  c_ = inputs[0][2];
  return Shape{c_};
}

absl::Status GlobalAvgPoolLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                         const LayerContext& ctx) {
  const int64_t n = in[0]->dim(0), hw = hw_, c = c_;
  const float* x = in[0]->data<float>();
  float* y = out->data<float>();
  const float inv = 1.0f / static_cast<float>(hw);
#pragma omp parallel for if (n * hw * c > 65536)
  for (int64_t i = 0; i < n; ++i) {
    float* yi = y + i * c;
    const float* xi = x + i * hw * c;
    for (int64_t j = 0; j < c; ++j) yi[j] = 0.0f;
    // Position-major sweep keeps the channel loop contiguous (vectorised).
    for (int64_t p = 0; p < hw; ++p) {
      const float* row = xi + p * c;
      for (int64_t j = 0; j < c; ++j) yi[j] += row[j];
    }
    for (int64_t j = 0; j < c; ++j) yi[j] *= inv;
  }
  return absl::OkStatus();
}

absl::Status GlobalAvgPoolLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                          const Tensor& dout, const std::vector<Tensor*>& din,
                                          const LayerContext& ctx) {
  if (din[0] == nullptr) return absl::OkStatus();
  const int64_t n = in[0]->dim(0), hw = hw_, c = c_;
  const float* dy = dout.data<float>();
  float* dx = din[0]->data<float>();
  const float inv = 1.0f / static_cast<float>(hw);
#pragma omp parallel for if (n * hw * c > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float* dyi = dy + i * c;
    float* dxi = dx + i * hw * c;
    for (int64_t p = 0; p < hw; ++p) {
      float* row = dxi + p * c;
      for (int64_t j = 0; j < c; ++j) row[j] = dyi[j] * inv;
    }
  }
  return absl::OkStatus();
}

namespace {
absl::StatusOr<std::unique_ptr<Layer>> MakeGlobalAvgPool(const v1::LayerSpec&) {
  return std::unique_ptr<Layer>(new GlobalAvgPoolLayer());
}
}  // namespace

YOKE_REGISTER_LAYER("global_avg_pool", MakeGlobalAvgPool);

}  // namespace yoke::engine
