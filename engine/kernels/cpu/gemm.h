// Row-major single-precision GEMM on the CPU, through oneDNN.
//
// C (m x n) = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T.
// A is (m x k) when !trans_a, else (k x m); B is (k x n) when !trans_b, else (n x k).
#ifndef YOKE_ENGINE_KERNELS_CPU_GEMM_H_
#define YOKE_ENGINE_KERNELS_CPU_GEMM_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace yoke::engine::cpu {

// oneDNN's JIT sgemm, for any shape, with no set-up.
absl::Status Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, const float* b, float beta, float* c);

// C = op(A) op(B) (alpha 1, beta 0) through a oneDNN matmul primitive made
// once for one shape. oneDNN 2.6 picks its AVX-512 batch-reduce kernels for
// the primitive where its sgemm keeps a generic path: the zoo CNN's dense
// backward-data product, W (3136 x 1024) . dy^T (1024 x 64), takes 1.97 ms
// this way against 2.6-2.8 ms through Sgemm (2 threads, AVX-512; bench/
// README.md, "CNN step"). Making the primitive costs about a millisecond, so
// a plan pays only when it runs many times.
//
// Thread-safety: a plan runs on the calling thread's oneDNN stream; one
// plan must not run on two threads at once.
class MatmulPlan {
 public:
  static absl::StatusOr<std::unique_ptr<MatmulPlan>> Create(bool trans_a, bool trans_b, int64_t m,
                                                            int64_t n, int64_t k);
  ~MatmulPlan();

  bool Matches(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k) const {
    return trans_a == trans_a_ && trans_b == trans_b_ && m == m_ && n == n_ && k == k_;
  }
  absl::Status Run(const float* a, const float* b, float* c);

 private:
  struct Impl;
  MatmulPlan() = default;
  bool trans_a_ = false, trans_b_ = false;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace yoke::engine::cpu

#endif  // YOKE_ENGINE_KERNELS_CPU_GEMM_H_
