// Per-channel and per-element functors (math/hd.h) of the CUDA batch_norm
// layer (engine/layers/cuda/batch_norm.*), and the sequences that run them.
//
// x, y, dy, dx: (M, C) channels-last rows (an (N, H, W, C) batch is
// M = N*H*W rows). Reductions over the rows are deterministic and two-level:
// a *ChunkFn runs one i per (chunk, channel), i = chunk * C + channel,
// summing its kBnChunkRows rows in order in double into partial[i]; a
// per-channel functor then sums the chunks in order. Statistics match the
// CPU layer (engine/layers/batch_norm.h): two-pass mean and centred biased
// variance, invstd = 1 / sqrt(var + eps), the running statistics moved with
// the CPU's float expression and the unbiased variance, and Backward
//   dbeta = sum dy, dgamma = sum dy * xhat,
//   dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M)
// (eval: the running statistics are constants, so dx = gamma * invstd * dy).
//
// The sequences (BnForwardTraining, BnForwardInference, BnBackward) take a
// runner, run(what, n, f) -> bool (false: stop, the runner keeps the
// error): LaunchForEach on the device, HostForEach in the host tests, so the
// tests run the device's very sequence and buffer wiring.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_BATCH_NORM_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_BATCH_NORM_H_

#include <cstdint>

#include "engine/kernels/cuda/math/exact.h"
#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

constexpr int64_t kBnChunkRows = 256;
inline int64_t BnChunks(int64_t rows) { return (rows + kBnChunkRows - 1) / kBnChunkRows; }

// The rows [begin, end) of chunk i / c.
struct BnRowRange {
  int64_t begin, end;
  YOKE_HD BnRowRange(int64_t i, int64_t c, int64_t rows) {
    begin = (i / c) * kBnChunkRows;
    end = begin + kBnChunkRows < rows ? begin + kBnChunkRows : rows;
  }
};

// partial[i] = sum of x over chunk i's rows of channel i % c.
struct BnSumChunkFn {
  const float* x;
  int64_t rows, c;
  double* partial;
  YOKE_HD void operator()(int64_t i) const {
    const int64_t ch = i % c;
    const BnRowRange r(i, c, rows);
    double s = 0.0;
    for (int64_t row = r.begin; row < r.end; ++row)
      s = Add(s, static_cast<double>(x[row * c + ch]));
    partial[i] = s;
  }
};

// partial[i] = sum of (x - mean)^2 over chunk i's rows of channel i % c.
struct BnSquaresChunkFn {
  const float* x;
  int64_t rows, c;
  const double* mean;  // (C)
  double* partial;
  YOKE_HD void operator()(int64_t i) const {
    const int64_t ch = i % c;
    const BnRowRange r(i, c, rows);
    double s = 0.0;
    for (int64_t row = r.begin; row < r.end; ++row) {
      const double d = Sub(static_cast<double>(x[row * c + ch]), mean[ch]);
      s = Add(s, Mul(d, d));
    }
    partial[i] = s;
  }
};

// The chunks of channel ch summed in order.
YOKE_HD inline double BnSumChunks(const double* partial, int64_t chunks, int64_t c, int64_t ch) {
  double s = 0.0;
  for (int64_t k = 0; k < chunks; ++k) s = Add(s, partial[k * c + ch]);
  return s;
}

// Per channel: the batch mean, in double (for the second pass) and float.
struct BnMeanFn {
  const double* partial;
  int64_t chunks, c, rows;
  double* mean_d;
  float* mean;
  YOKE_HD void operator()(int64_t ch) const {
    mean_d[ch] = Div(BnSumChunks(partial, chunks, c, ch), static_cast<double>(rows));
    mean[ch] = static_cast<float>(mean_d[ch]);
  }
};

// invstd = 1 / sqrt(var + eps), in float as the CPU's synchronized path.
YOKE_HD inline float BnInvStd(float var, float eps) { return Div(1.0f, Sqrt(Add(var, eps))); }

// Per channel: the biased batch variance and its invstd.
struct BnVarFn {
  const double* partial;
  int64_t chunks, c, rows;
  float eps;
  float* var;
  float* invstd;
  YOKE_HD void operator()(int64_t ch) const {
    var[ch] =
        static_cast<float>(Div(BnSumChunks(partial, chunks, c, ch), static_cast<double>(rows)));
    invstd[ch] = BnInvStd(var[ch], eps);
  }
};

// Per channel: invstd of given (running) variances.
struct BnInvStdFn {
  const float* var;
  float eps;
  float* invstd;
  YOKE_HD void operator()(int64_t ch) const { invstd[ch] = BnInvStd(var[ch], eps); }
};

// Per element: y = gamma * (x - mean) * invstd + beta.
struct BnNormalizeFn {
  const float* x;
  float* y;
  const float* mean;
  const float* invstd;
  const float* gamma;
  const float* beta;
  int64_t c;
  YOKE_HD void operator()(int64_t i) const {
    const int64_t ch = i % c;
    const float xhat = Mul(Sub(x[i], mean[ch]), invstd[ch]);
    y[i] = Add(Mul(gamma[ch], xhat), beta[ch]);
  }
};

// The running statistics' unbiasing factor for m rows (CPU layer's).
inline float BnUnbias(int64_t rows) {
  const double m = static_cast<double>(rows);
  return m > 1 ? static_cast<float>(m / (m - 1)) : 1.0f;
}

// Per channel: running = (1 - momentum) running + momentum batch, the
// variance unbiased; the CPU layer's float expression.
struct BnRunningFn {
  float* running_mean;
  float* running_var;
  const float* mean;
  const float* var;
  float momentum, unbias;
  YOKE_HD void operator()(int64_t ch) const {
    const float keep = Sub(1.0f, momentum);
    running_mean[ch] = Add(Mul(keep, running_mean[ch]), Mul(momentum, mean[ch]));
    running_var[ch] = Add(Mul(keep, running_var[ch]), Mul(Mul(momentum, var[ch]), unbias));
  }
};

// partial_dy[i], partial_dyx[i] = sum of dy, dy * xhat over chunk i's rows.
struct BnGradChunkFn {
  const float* x;
  const float* dy;
  const float* mean;
  const float* invstd;
  int64_t rows, c;
  double* partial_dy;
  double* partial_dyx;
  YOKE_HD void operator()(int64_t i) const {
    const int64_t ch = i % c;
    const BnRowRange r(i, c, rows);
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t row = r.begin; row < r.end; ++row) {
      const int64_t e = row * c + ch;
      const float xhat = Mul(Sub(x[e], mean[ch]), invstd[ch]);
      sdy = Add(sdy, static_cast<double>(dy[e]));
      sdyx = Add(sdyx, Mul(static_cast<double>(dy[e]), static_cast<double>(xhat)));
    }
    partial_dy[i] = sdy;
    partial_dyx[i] = sdyx;
  }
};

// Per channel: dbeta, dgamma, and dx's per-channel factors. With
// global_stats the statistics are constants: mean_dy = mean_dyx = 0.
struct BnGradReduceFn {
  const double* partial_dy;
  const double* partial_dyx;
  int64_t chunks, c, rows;
  bool global_stats;
  const float* gamma;
  const float* invstd;
  float* dgamma;
  float* dbeta;
  float* scale;
  float* mean_dy;
  float* mean_dyx;
  YOKE_HD void operator()(int64_t ch) const {
    const double sdy = BnSumChunks(partial_dy, chunks, c, ch);
    const double sdyx = BnSumChunks(partial_dyx, chunks, c, ch);
    dbeta[ch] = static_cast<float>(sdy);
    dgamma[ch] = static_cast<float>(sdyx);
    scale[ch] = Mul(gamma[ch], invstd[ch]);
    const double m = static_cast<double>(rows);
    mean_dy[ch] = global_stats ? 0.0f : static_cast<float>(Div(sdy, m));
    mean_dyx[ch] = global_stats ? 0.0f : static_cast<float>(Div(sdyx, m));
  }
};

// Per element: dx = scale * (dy - mean_dy - xhat * mean_dyx).
struct BnDxFn {
  const float* x;
  const float* dy;
  float* dx;
  const float* mean;
  const float* invstd;
  const float* scale;
  const float* mean_dy;
  const float* mean_dyx;
  int64_t c;
  YOKE_HD void operator()(int64_t i) const {
    const int64_t ch = i % c;
    const float xhat = Mul(Sub(x[i], mean[ch]), invstd[ch]);
    dx[i] = Mul(scale[ch], Sub(Sub(dy[i], mean_dy[ch]), Mul(xhat, mean_dyx[ch])));
  }
};

// The buffers of one layer (device memory on the device). The (C) float
// arrays persist from Forward to Backward; the doubles are scratch
// (BnScratchDoubles of them: partial_a, partial_b, mean_d in that order).
struct BnBuffers {
  int64_t rows, c;
  float* mean;
  float* var;
  float* invstd;
  float* scale;
  float* mean_dy;
  float* mean_dyx;
  double* partial_a;  // (BnChunks(rows) * C)
  double* partial_b;  // (BnChunks(rows) * C)
  double* mean_d;     // (C)
};
constexpr int64_t kBnChannelFloats = 6;  // mean .. mean_dyx
inline int64_t BnScratchDoubles(int64_t rows, int64_t c) { return (2 * BnChunks(rows) + 1) * c; }
// Points b's arrays into `floats` (kBnChannelFloats * c) and `doubles`.
inline BnBuffers BnLayout(int64_t rows, int64_t c, float* floats, double* doubles) {
  const int64_t pc = BnChunks(rows) * c;
  return BnBuffers{rows,
                   c,
                   floats,
                   floats + c,
                   floats + 2 * c,
                   floats + 3 * c,
                   floats + 4 * c,
                   floats + 5 * c,
                   doubles,
                   doubles + pc,
                   doubles + 2 * pc};
}

// The parameters and state a sequence reads and writes (device memory).
struct BnParams {
  const float* gamma;
  const float* beta;
  float* running_mean;
  float* running_var;
  float momentum, eps;
};

template <typename Run>
bool BnForwardTraining(Run& run, const BnBuffers& b, const BnParams& p, const float* x, float* y) {
  const int64_t pc = BnChunks(b.rows) * b.c;
  return run("cuda::BnSum", pc, BnSumChunkFn{x, b.rows, b.c, b.partial_a}) &&
         run("cuda::BnMean", b.c, BnMeanFn{b.partial_a, pc / b.c, b.c, b.rows, b.mean_d, b.mean}) &&
         run("cuda::BnSquares", pc, BnSquaresChunkFn{x, b.rows, b.c, b.mean_d, b.partial_a}) &&
         run("cuda::BnVar", b.c,
             BnVarFn{b.partial_a, pc / b.c, b.c, b.rows, p.eps, b.var, b.invstd}) &&
         run("cuda::BnNormalize", b.rows * b.c,
             BnNormalizeFn{x, y, b.mean, b.invstd, p.gamma, p.beta, b.c}) &&
         run("cuda::BnRunning", b.c,
             BnRunningFn{p.running_mean, p.running_var, b.mean, b.var, p.momentum,
                         BnUnbias(b.rows)});
}

template <typename Run>
bool BnForwardInference(Run& run, const BnBuffers& b, const BnParams& p, const float* x, float* y) {
  return run("cuda::BnInvStd", b.c, BnInvStdFn{p.running_var, p.eps, b.invstd}) &&
         run("cuda::BnNormalize", b.rows * b.c,
             BnNormalizeFn{x, y, p.running_mean, b.invstd, p.gamma, p.beta, b.c});
}

// training: differentiate through the statistics of the preceding
// BnForwardTraining (b.mean, b.invstd); else the running statistics are
// constants. dx may be null (dgamma and dbeta only).
template <typename Run>
bool BnBackward(Run& run, const BnBuffers& b, const BnParams& p, bool training, const float* x,
                const float* dy, float* dx, float* dgamma, float* dbeta) {
  const int64_t pc = BnChunks(b.rows) * b.c;
  const float* mean = training ? b.mean : p.running_mean;
  if (!training && !run("cuda::BnInvStd", b.c, BnInvStdFn{p.running_var, p.eps, b.invstd})) {
    return false;
  }
  if (!run("cuda::BnGradSums", pc,
           BnGradChunkFn{x, dy, mean, b.invstd, b.rows, b.c, b.partial_a, b.partial_b}) ||
      !run("cuda::BnGradReduce", b.c,
           BnGradReduceFn{b.partial_a, b.partial_b, pc / b.c, b.c, b.rows, !training, p.gamma,
                          b.invstd, dgamma, dbeta, b.scale, b.mean_dy, b.mean_dyx})) {
    return false;
  }
  if (dx == nullptr) return true;
  return run("cuda::BnDx", b.rows * b.c,
             BnDxFn{x, dy, dx, mean, b.invstd, b.scale, b.mean_dy, b.mean_dyx, b.c});
}

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_BATCH_NORM_H_
