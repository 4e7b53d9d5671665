// Row-major single-precision GEMM on the CPU (oneDNN's JIT sgemm).
//
// C (m x n) = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T.
// A is (m x k) when !trans_a, else (k x m); B is (k x n) when !trans_b, else (n x k).
#ifndef YOKE_ENGINE_KERNELS_CPU_GEMM_H_
#define YOKE_ENGINE_KERNELS_CPU_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"

namespace yoke::engine::cpu {

absl::Status Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, const float* b, float beta, float* c);

}  // namespace yoke::engine::cpu

#endif  // YOKE_ENGINE_KERNELS_CPU_GEMM_H_
