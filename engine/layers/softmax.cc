#include "engine/layers/softmax.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {
absl::StatusOr<Shape> SoftmaxLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  // The shape rules are shared with job validation (engine/shapes/).
  return shapes::SoftmaxOutput(inputs);
}

absl::Status SoftmaxLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                                   const LayerContext& ctx) {
  const int64_t n = in[0]->numel();
  const int64_t k = in[0]->dim(-1);
  const int64_t rows = n / k;
  const float* x = in[0]->data<float>();
  float* y = out->data<float>();
#pragma omp parallel for if (n > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    float* yr = y + r * k;
    float mx = xr[0];
    for (int64_t j = 1; j < k; ++j) mx = xr[j] > mx ? xr[j] : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      yr[j] = std::exp(xr[j] - mx);
      sum += yr[j];
    }
    // sum >= 1 (the max term is exp(0)), so the division is always safe.
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) yr[j] *= inv;
  }
  return absl::OkStatus();
}

absl::Status SoftmaxLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                    const Tensor& dout, const std::vector<Tensor*>& din,
                                    const LayerContext& ctx) {
  if (din[0] == nullptr) return absl::OkStatus();
  const int64_t n = out.numel();
  const int64_t k = out.dim(-1);
  const int64_t rows = n / k;
  const float* y = out.data<float>();
  const float* dy = dout.data<float>();
  float* dx = din[0]->data<float>();
#pragma omp parallel for if (n > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * k;
    const float* gr = dy + r * k;
    float* dr = dx + r * k;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < k; ++j) dot += yr[j] * gr[j];
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) dr[j] = yr[j] * (gr[j] - dot);
  }
  return absl::OkStatus();
}

namespace {
absl::StatusOr<std::unique_ptr<Layer>> MakeSoftmax(const v1::LayerSpec&) {
  return std::unique_ptr<Layer>(new SoftmaxLayer());
}
}  // namespace

YOKE_REGISTER_LAYER("softmax", MakeSoftmax);

}  // namespace yoke::engine
