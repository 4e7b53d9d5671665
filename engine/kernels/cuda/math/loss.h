// Per-row functors (math/hd.h) of the CUDA losses (engine/losses/cuda/).
//
// Logits z: (N, K) f32 row-major, labels y: (N) i32. A row functor runs one
// i per example row: it computes the row's loss term (double) and flags
// (correct / bad label) into row_loss[i], row_flag[i], and, when dz is
// non-null, writes the row's gradient dz[i*K, (i+1)*K). It is the CPU loss's
// per-row arithmetic in the same order (engine/losses/softmax_cross_entropy.cc,
// engine/losses/mse.cc), written with math/exact.h so nvcc fuses nothing;
// only exp/log may differ (CUDA's against glibc's, <= 1 ulp in double).
// LossTotalsFn (one i) then sums the rows in order, as the CPU's loop does,
// so loss_sum is the CPU's value bit for bit given the same row terms.
// A row with a label outside [0, K) writes no gradient and is reported.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_LOSS_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_LOSS_H_

#include <cstdint>

#include "engine/kernels/cuda/math/exact.h"
#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

// row_flag bits.
constexpr int32_t kRowCorrect = 1;   // the arg-max logit is the label
constexpr int32_t kRowBadLabel = 2;  // the label is outside [0, K)

// The first arg-max of row[0, k) (the CPU's strict > scan), and its value.
YOKE_HD inline int64_t RowArgMax(const float* row, int64_t k, float* max) {
  float mx = row[0];
  int64_t arg = 0;
  for (int64_t j = 1; j < k; ++j) {
    if (row[j] > mx) {
      mx = row[j];
      arg = j;
    }
  }
  *max = mx;
  return arg;
}

// softmax_cross_entropy with label smoothing `eps` (off = eps / K,
// on = 1 - eps + off, in double as the CPU computes them: SetTargets).
struct SoftmaxXentRowFn {
  const float* z;
  const int32_t* y;
  float* dz;  // null: no gradient
  int64_t k;
  float eps;
  double off, on;
  float grad_scale;
  double* row_loss;
  int32_t* row_flag;
  void SetTargets() {
    off = static_cast<double>(eps) / static_cast<double>(k);
    on = 1.0 - static_cast<double>(eps) + off;
  }
  YOKE_HD void operator()(int64_t i) const {
    const int32_t label = y[i];
    if (label < 0 || label >= k) {
      row_loss[i] = 0.0;
      row_flag[i] = kRowBadLabel;
      return;
    }
    const float* row = z + i * k;
    float mx;
    const int64_t arg = RowArgMax(row, k, &mx);
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum = Add(sum, Exp(static_cast<double>(Sub(row[j], mx))));
    const double log_sum = Log(sum);
    const double zy = static_cast<double>(Sub(row[label], mx));
    if (eps == 0.0f) {
      row_loss[i] = Sub(log_sum, zy);
    } else {
      double dot = 0.0;
      for (int64_t j = 0; j < k; ++j) dot = Add(dot, static_cast<double>(Sub(row[j], mx)));
      dot = Add(Mul(off, dot), Mul(Sub(on, off), zy));
      row_loss[i] = Sub(log_sum, dot);
    }
    row_flag[i] = arg == label ? kRowCorrect : 0;
    if (dz == nullptr) return;
    float* drow = dz + i * k;
    for (int64_t j = 0; j < k; ++j) {
      const float p = static_cast<float>(Exp(Sub(static_cast<double>(Sub(row[j], mx)), log_sum)));
      const float t =
          eps == 0.0f ? (j == label ? 1.0f : 0.0f) : static_cast<float>(j == label ? on : off);
      drow[j] = Mul(grad_scale, Sub(p, t));
    }
  }
};

// mse against onehot(y): row term sum_j (z_j - t_j)^2 / K; the gradient
// dscale * (z - t) with dscale = grad_scale * 2 / K (MseDScale).
inline float MseDScale(float grad_scale, int64_t k) {
  return grad_scale * 2.0f / static_cast<float>(k);
}
struct MseRowFn {
  const float* z;
  const int32_t* y;
  float* dz;  // null: no gradient
  int64_t k;
  float dscale;
  double* row_loss;
  int32_t* row_flag;
  YOKE_HD void operator()(int64_t i) const {
    const int32_t label = y[i];
    if (label < 0 || label >= k) {
      row_loss[i] = 0.0;
      row_flag[i] = kRowBadLabel;
      return;
    }
    const float* row = z + i * k;
    int64_t arg = 0;
    double sq = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      if (row[j] > row[arg]) arg = j;
      const double d = Sub(static_cast<double>(row[j]), j == label ? 1.0 : 0.0);
      sq = Add(sq, Mul(d, d));
    }
    row_loss[i] = Div(sq, static_cast<double>(k));
    row_flag[i] = arg == label ? kRowCorrect : 0;
    if (dz == nullptr) return;
    float* drow = dz + i * k;
    for (int64_t j = 0; j < k; ++j) drow[j] = Mul(dscale, Sub(row[j], j == label ? 1.0f : 0.0f));
  }
};

// What a loss reads back: the sums and the first bad label (row -1: none).
struct LossTotals {
  double loss_sum;
  int64_t correct;
  int64_t bad_row;
  int64_t bad_label;
};

// Run with n = 1: sums the n rows' terms and flags in row order.
struct LossTotalsFn {
  const double* row_loss;
  const int32_t* row_flag;
  const int32_t* y;
  int64_t rows;
  LossTotals* out;
  YOKE_HD void operator()(int64_t) const {
    LossTotals t{0.0, 0, -1, 0};
    for (int64_t i = 0; i < rows; ++i) {
      t.loss_sum = Add(t.loss_sum, row_loss[i]);
      if (row_flag[i] & kRowCorrect) ++t.correct;
      if ((row_flag[i] & kRowBadLabel) && t.bad_row < 0) {
        t.bad_row = i;
        t.bad_label = y[i];
      }
    }
    *out = t;
  }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_LOSS_H_
