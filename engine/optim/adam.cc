#include "engine/optim/adam.h"

#include <cmath>

#ifdef __SSE2__
#include <immintrin.h>
#endif

#include "common/status.h"
#include "engine/kernels/cpu/parallel.h"

namespace yoke::engine {
Adam::Adam(ParamSet* params, const AdamOptions& options) : Optimizer(params), options_(options) {}

absl::Status Adam::AllocateState() {
  const Tensor& p = params_->flat_values();
  ASSIGN_OR_RETURN(m_, Tensor::AllocateZeros(p.shape(), DType::kF32, p.device(),
                                             "optimizer first moment (adam)"));
  ASSIGN_OR_RETURN(v_, Tensor::AllocateZeros(p.shape(), DType::kF32, p.device(),
                                             "optimizer second moment (adam)"));
  return absl::OkStatus();
}

absl::Status Adam::Step(float lr, float grad_scale) {
  RETURN_IF_ERROR(CheckStep(lr, grad_scale));
  const float gs = grad_scale;
  const int64_t t = step_count_ + 1;
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.epsilon;
  // Bias corrections in double: 1 - b2^t is ~1e-3 at t = 1 and would lose
  // digits in float.
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(double{b1}, t)));
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{b2}, t)));
  // Coupled L2 enters the gradient; decoupled decay shrinks p directly.
  const float l2 = options_.decoupled ? 0.0f : options_.weight_decay;
  const float shrink = options_.decoupled ? 1.0f - lr * options_.weight_decay : 1.0f;

  const int64_t n = params_->flat_values().numel();
  float* __restrict p = params_->flat_values().data<float>();
  const float* __restrict grad = params_->flat_grads().data<float>();
  float* __restrict m = m_.data<float>();
  float* __restrict v = v_.data<float>();
  // One element of the update; the SSE body below is the same arithmetic
  // four lanes at a time.
  auto update = [&](int64_t i) {
    const float g = gs * grad[i] + l2 * p[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = shrink * p[i] - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  };
#ifdef __SSE2__
  // Written with intrinsics because std::sqrt may set errno, which keeps GCC
  // from vectorising the loop unless the whole build uses -fno-math-errno.
  const int64_t n4 = n / 4;
  const __m128 vb1 = _mm_set1_ps(b1), vb2 = _mm_set1_ps(b2);
  const __m128 vc1 = _mm_set1_ps(1.0f - b1), vc2 = _mm_set1_ps(1.0f - b2);
  const __m128 vl2 = _mm_set1_ps(l2), vshrink = _mm_set1_ps(shrink);
  const __m128 vstep = _mm_set1_ps(step_size), vbc2 = _mm_set1_ps(inv_sqrt_bc2);
  const __m128 veps = _mm_set1_ps(eps), vgs = _mm_set1_ps(gs);
#pragma omp parallel for if (n > kParallelThreshold)
  for (int64_t q = 0; q < n4; ++q) {
    const int64_t i = 4 * q;
    const __m128 pi = _mm_loadu_ps(p + i);
    const __m128 g = _mm_add_ps(_mm_mul_ps(vgs, _mm_loadu_ps(grad + i)), _mm_mul_ps(vl2, pi));
    const __m128 mi = _mm_add_ps(_mm_mul_ps(vb1, _mm_loadu_ps(m + i)), _mm_mul_ps(vc1, g));
    const __m128 vi =
        _mm_add_ps(_mm_mul_ps(vb2, _mm_loadu_ps(v + i)), _mm_mul_ps(_mm_mul_ps(vc2, g), g));
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
    const __m128 denom = _mm_add_ps(_mm_mul_ps(_mm_sqrt_ps(vi), vbc2), veps);
    _mm_storeu_ps(p + i,
                  _mm_sub_ps(_mm_mul_ps(vshrink, pi), _mm_div_ps(_mm_mul_ps(vstep, mi), denom)));
  }
  for (int64_t i = 4 * n4; i < n; ++i) update(i);
#else
#pragma omp parallel for if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) update(i);
#endif
  step_count_ = t;
  return absl::OkStatus();
}

std::vector<std::pair<std::string, Tensor>> Adam::State() const {
  return {{"exp_avg", m_}, {"exp_avg_sq", v_}};
}

}  // namespace yoke::engine
