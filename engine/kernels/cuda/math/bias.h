// Per-element functors of the bias add and the bias gradient, shared by the
// CUDA kernels (bias.cu) and their host tests (math/bias_fn_test.cc).
//
// Both treat an activation as a row-major (rows, cols) matrix whose last
// dimension is the channel: a dense layer's (N, U) or a convolution's NHWC
// output as (N*H'*W', K).
//
// The gradient is deterministic: every sum runs in a fixed order, with no
// atomics. It is taken in two passes: BiasPartialSumFn sums each chunk of
// BiasChunkRows(rows) rows per column, BiasChunkSumFn adds the chunks' sums
// in order. With one chunk the first pass writes the gradient directly.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATH_BIAS_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATH_BIAS_H_

#include <cstdint>

#include "engine/kernels/cuda/math/hd.h"

namespace yoke::engine::cuda {

// The rows one thread of the first pass sums: all of them up to
// kBiasMinChunkRows, else about sqrt(rows) (at least kBiasMinChunkRows), so
// that both passes loop about equally long (a ResNet stem's 3.2 million rows
// at batch 256: chunks of 1,792 rows, 1,792 chunks). A function of `rows`
// alone: the same shape always sums in the same order.
constexpr int64_t kBiasMinChunkRows = 256;
inline int64_t BiasChunkRows(int64_t rows) {
  if (rows <= kBiasMinChunkRows) return rows < 1 ? 1 : rows;
  int64_t r = kBiasMinChunkRows;
  while (r * r < rows) r += 64;
  return r;
}

// The number of chunks of BiasChunkRows(rows) rows (at least 1).
inline int64_t BiasChunks(int64_t rows) {
  const int64_t chunk = BiasChunkRows(rows);
  return rows <= chunk ? 1 : (rows + chunk - 1) / chunk;
}

// y[r, c] += b[c], one i per element of y (rows * cols).
struct BiasAddFn {
  float* y;
  const float* b;
  int64_t cols;
  YOKE_HD void operator()(int64_t i) const { y[i] += b[i % cols]; }
};

// partial[chunk, c] = sum of dy[r, c] over the chunk's rows, in row order;
// one i per (chunk, c): chunks * cols. Adjacent i read adjacent columns.
// chunk_rows = BiasChunkRows(rows).
struct BiasPartialSumFn {
  const float* dy;
  float* partial;
  int64_t rows, cols, chunk_rows;
  YOKE_HD void operator()(int64_t i) const {
    const int64_t chunk = i / cols, c = i % cols;
    const int64_t begin = chunk * chunk_rows;
    const int64_t end = begin + chunk_rows < rows ? begin + chunk_rows : rows;
    float s = 0.0f;
    for (int64_t r = begin; r < end; ++r) s += dy[r * cols + c];
    partial[i] = s;
  }
};

// db[c] = sum of partial[chunk, c] over the chunks, in order; one i per c.
struct BiasChunkSumFn {
  const float* partial;
  float* db;
  int64_t chunks, cols;
  YOKE_HD void operator()(int64_t c) const {
    float s = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
    db[c] = s;
  }
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATH_BIAS_H_
