#include "engine/layers/add.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cpu/parallel.h"
#include "engine/registry.h"
#include "engine/shapes/layer_shapes.h"

namespace yoke::engine {
absl::StatusOr<Shape> AddLayer::Build(const std::vector<Shape>& inputs, ParamSet* params) {
  inputs_ = inputs.size();
  // The shape rules are shared with job validation (engine/shapes/).
  return shapes::AddOutput(inputs);
}

absl::Status AddLayer::Forward(const std::vector<const Tensor*>& in, Tensor* out,
                               const LayerContext& ctx) {
  const int64_t n = out->numel();
  if (in.size() == 2 && (out->raw() == in[0]->raw() || out->raw() == in[1]->raw())) {
    // y over one input (MayOverwriteInput): y += the other, the same sum.
    float* __restrict y = out->data<float>();
    const float* __restrict b = (out->raw() == in[0]->raw() ? in[1] : in[0])->data<float>();
    if (relu_) {
#pragma omp parallel for simd if (n > kParallelThreshold)
      for (int64_t i = 0; i < n; ++i) {
        const float v = y[i] + b[i];
        y[i] = v > 0.0f ? v : 0.0f;
      }
    } else {
#pragma omp parallel for simd if (n > kParallelThreshold)
      for (int64_t i = 0; i < n; ++i) y[i] += b[i];
    }
    return absl::OkStatus();
  }
  float* __restrict y = out->data<float>();
  const float* __restrict a = in[0]->data<float>();
  const float* __restrict b = in[1]->data<float>();
  // The first two inputs in one pass; the rare extra ones accumulate. A
  // fused ReLU is applied by the last pass (as the ReLU layer would).
  if (relu_ && in.size() == 2) {
#pragma omp parallel for simd if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      const float v = a[i] + b[i];
      y[i] = v > 0.0f ? v : 0.0f;
    }
    return absl::OkStatus();
  }
#pragma omp parallel for simd if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
  for (size_t k = 2; k < in.size(); ++k) {
    const float* __restrict c = in[k]->data<float>();
#pragma omp parallel for simd if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) y[i] += c[i];
  }
  if (relu_) {
#pragma omp parallel for simd if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
  }
  return absl::OkStatus();
}

absl::Status AddLayer::Backward(const std::vector<const Tensor*>& in, const Tensor& out,
                                const Tensor& dout, const std::vector<Tensor*>& din,
                                const LayerContext& ctx) {
  for (Tensor* d : din) {
    if (d != nullptr) std::memcpy(d->raw(), dout.raw(), dout.bytes());
  }
  return absl::OkStatus();
}

namespace {
absl::StatusOr<std::unique_ptr<Layer>> MakeAdd(const v1::LayerSpec&) {
  return std::unique_ptr<Layer>(new AddLayer());
}
}  // namespace

YOKE_REGISTER_LAYER("add", MakeAdd);

}  // namespace yoke::engine
