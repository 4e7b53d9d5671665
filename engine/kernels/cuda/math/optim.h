// Per-element functors (math/hd.h) of the CUDA optimizers
// (engine/optim/cuda/) and of their gradient norm.
//
// Each update functor is the CPU optimizer's per-element arithmetic in the
// CPU loop's order (engine/optim/sgd.cc SgdUpdate, engine/optim/adam.cc
// Adam::Step), written with math/exact.h so that the device rounds exactly
// as the CPU does: a step gives the CPU's bits. f(i) reads and writes
// element i of the flat buffers only. The scalars that depend on the step
// (Adam's bias corrections) are computed on the host by AdamScalarsFor,
// with the CPU's expressions.
//
// The gradient norm is a deterministic two-level reduction in double:
// SumSquaresChunkFn (i per partial sum, a fixed strided set of elements in
// order) then SumChunksFn (one i, the partials in order).
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_OPTIM_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_OPTIM_H_

#include <cmath>
#include <cstdint>

#include "engine/kernels/cuda/math/exact.h"
#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

// SGD, PyTorch semantics (engine/optim/sgd.h); mode picks SgdUpdate's loop.
struct SgdStepFn {
  enum Mode : int { kPlain = 0, kMomentum = 1, kNesterov = 2 };
  float* p;
  const float* g;
  float* v;  // null for kPlain
  float lr, grad_scale, momentum, weight_decay;
  int mode;
  YOKE_HD void operator()(int64_t i) const {
    const float pi = p[i];
    if (mode == kPlain) {
      p[i] = Sub(pi, Mul(lr, Add(Mul(grad_scale, g[i]), Mul(weight_decay, pi))));
      return;
    }
    if (mode == kNesterov) {
      const float gi = Add(Mul(grad_scale, g[i]), Mul(weight_decay, pi));
      const float vi = Add(Mul(momentum, v[i]), gi);
      v[i] = vi;
      p[i] = Sub(pi, Mul(lr, Add(gi, Mul(momentum, vi))));
      return;
    }
    const float vi = Add(Add(Mul(momentum, v[i]), Mul(grad_scale, g[i])), Mul(weight_decay, pi));
    v[i] = vi;
    p[i] = Sub(pi, Mul(lr, vi));
  }
};

// The per-step scalars of Adam/AdamW for step t (1-based), exactly as
// Adam::Step computes them.
struct AdamScalars {
  float step_size, inv_sqrt_bc2, l2, shrink, c1, c2;
};
inline AdamScalars AdamScalarsFor(float lr, float beta1, float beta2, float weight_decay,
                                  bool decoupled, int64_t t) {
  AdamScalars s;
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(double{beta1}, t)));
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double{beta2}, t)));
  s.l2 = decoupled ? 0.0f : weight_decay;
  s.shrink = decoupled ? 1.0f - lr * weight_decay : 1.0f;
  s.c1 = 1.0f - beta1;
  s.c2 = 1.0f - beta2;
  return s;
}

// Adam / AdamW (engine/optim/adam.h): m, v are the first and second moments.
struct AdamStepFn {
  float* p;
  const float* g;
  float* m;
  float* v;
  float grad_scale, beta1, beta2, epsilon;
  AdamScalars s;
  YOKE_HD void operator()(int64_t i) const {
    const float pi = p[i];
    const float gi = Add(Mul(grad_scale, g[i]), Mul(s.l2, pi));
    const float mi = Add(Mul(beta1, m[i]), Mul(s.c1, gi));
    const float vi = Add(Mul(beta2, v[i]), Mul(Mul(s.c2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = Add(Mul(Sqrt(vi), s.inv_sqrt_bc2), epsilon);
    p[i] = Sub(Mul(s.shrink, pi), Div(Mul(s.step_size, mi), denom));
  }
};

// The gradient norm's first level: NormPartials(n) partial sums, partial i
// over the elements i, i + P, i + 2P, ... (P = NormPartials(n)) in that
// order, so neighbouring threads read neighbouring elements.
constexpr int64_t kNormMaxPartials = 8192;
inline int64_t NormPartials(int64_t n) { return n < kNormMaxPartials ? n : kNormMaxPartials; }

// partial[i] = sum of double(g[j])^2 over partial i's j, in order.
struct SumSquaresChunkFn {
  const float* g;
  int64_t n, partials;
  double* partial;  // (partials,)
  YOKE_HD void operator()(int64_t i) const {
    double sum = 0.0;
    for (int64_t j = i; j < n; j += partials) {
      const double x = g[j];
      sum = Add(sum, Mul(x, x));
    }
    partial[i] = sum;
  }
};

// Run with n = 1: *out = sum of partial[0, chunks) in order.
struct SumChunksFn {
  const double* partial;
  int64_t chunks;
  double* out;
  YOKE_HD void operator()(int64_t) const {
    double sum = 0.0;
    for (int64_t k = 0; k < chunks; ++k) sum = Add(sum, partial[k]);
    *out = sum;
  }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_OPTIM_H_
