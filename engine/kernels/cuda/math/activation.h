// Per-element functors of the activations (relu, leaky_relu, sigmoid, tanh,
// gelu), forward and backward, with the formulas of the CPU ActivationLayer
// (engine/layers/activation.cc):
//   relu        y = x > 0 ? x : 0             dx = y > 0 ? dy : 0
//   leaky_relu  y = x > 0 ? x : alpha x       dx = x > 0 ? dy : alpha dy
//   sigmoid     y = 1 / (1 + exp(-x))         dx = dy y (1 - y)
//   tanh        y = tanh(x)                   dx = dy (1 - y y)
//   gelu        y = x Phi(x) (exact, erf)     dx = dy (Phi(x) + x phi(x))
// Backward reads y where the derivative is a function of it and x
// otherwise, as the CPU layer does.
//
// Contract: i indexes one element of flat arrays; f(i) reads x[i] (or y[i])
// and dy[i] and writes only y[i] (or dx[i]). y may alias x. On the host the
// results equal the CPU layer's bit for bit (same expressions, same libm);
// on the device exp, tanh and erf are CUDA's (within 2 ulp), the rest is
// rounded as on the CPU (math/round.h).
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_ACTIVATION_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_ACTIVATION_H_

#include <cmath>
#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"
#include "engine/kernels/cuda/math/round.h"

namespace yoke::engine::cuda {

enum class ActKind { kRelu, kLeakyRelu, kSigmoid, kTanh, kGelu };

// The scalar formulas; `alpha` matters for kLeakyRelu only.
template <ActKind K>
struct Act {
  static constexpr float kInvSqrt2 = 0.70710678118654752f;
  static constexpr float kInvSqrt2Pi = 0.39894228040143268f;

  YOKE_HD static float Forward(float x, float alpha) {
    switch (K) {
      case ActKind::kRelu:
        return x > 0.0f ? x : 0.0f;
      case ActKind::kLeakyRelu:
        return x > 0.0f ? x : alpha * x;
      case ActKind::kSigmoid:
        return 1.0f / (1.0f + std::exp(-x));
      case ActKind::kTanh:
        return std::tanh(x);
      case ActKind::kGelu:
        return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
    }
    return x;
  }

  // The gradient of the input from the input x, output y and dy.
  YOKE_HD static float Backward(float x, float y, float g, float alpha) {
    switch (K) {
      case ActKind::kRelu:
        return y > 0.0f ? g : 0.0f;
      case ActKind::kLeakyRelu:
        return x > 0.0f ? g : alpha * g;
      case ActKind::kSigmoid:
        return g * y * (1.0f - y);
      case ActKind::kTanh:
        return g * (1.0f - MulRn(y, y));
      case ActKind::kGelu: {
        const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
        const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
        return g * (cdf + MulRn(x, pdf));
      }
    }
    return g;
  }
};

// y[i] = f(x[i]).
template <ActKind K>
struct ActForwardFn {
  const float* x;
  float* y;
  float alpha;
  YOKE_HD void operator()(int64_t i) const { y[i] = Act<K>::Forward(x[i], alpha); }
};

// dx[i] = f'(x[i] or y[i]) dy[i]. x is read only by leaky_relu and gelu, y
// only by relu, sigmoid and tanh; the other may be null.
template <ActKind K>
struct ActBackwardFn {
  const float* x;
  const float* y;
  const float* dy;
  float* dx;
  float alpha;
  YOKE_HD void operator()(int64_t i) const {
    const bool reads_x = K == ActKind::kLeakyRelu || K == ActKind::kGelu;
    dx[i] = Act<K>::Backward(reads_x ? x[i] : 0.0f, reads_x ? 0.0f : y[i], dy[i], alpha);
  }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_ACTIVATION_H_
