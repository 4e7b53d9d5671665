// Dense-layer products on cuBLASLt, fp32 (CUBLAS_COMPUTE_32F: no TF32).
//
// Yoke's dense tensors are row-major: x (N, D), W (D, U), y (N, U). cuBLASLt
// is column-major, and a row-major (r, c) matrix read column-major is its
// transpose (c, r) with leading dimension c. So each product is taken on the
// transposes, with no transposition in memory:
//   forward        y^T (U, N)  = W^T (U, D)  x^T (D, N)
//   backward data  dx^T (D, N) = (W^T)^T     dy^T (U, N)
//   backward wts   dW^T (U, D) = dy^T (U, N) (x^T)^T
// DenseGemm gives the column-major parameters of each; a GemmShape's A, B
// and C are the tensors named in DenseProduct's comments.
//
// GemmShape and DenseGemm are pure host code. LtGemm creates its cuBLASLt
// descriptors on the host (no device needed) and picks its algorithm by
// heuristic on the first Run, with ctx's workspace (kLtWorkspaceBytes).
// The bias is not an epilogue here: cuBLASLt's BIAS epilogue wants a
// 16-byte aligned vector, and a bias inside the flat parameter buffer need
// not be; the layer adds it with its own kernel (bias.h).
//
// Thread-safety: an LtGemm belongs to one layer of one replica.
#ifndef YOKE_ENGINE_KERNELS_CUDA_MATMUL_H_
#define YOKE_ENGINE_KERNELS_CUDA_MATMUL_H_

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/kernels/cuda/device_context.h"

namespace yoke::engine::cuda {

// Column-major C (m, n) = op(A) (m, k) . op(B) (k, n), op = transpose when
// the flag is set; lda/ldb/ldc are the leading dimensions of A, B, C as
// stored (A is (m, k) untransposed, (k, m) transposed).
struct GemmShape {
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  // TF32 allowed (CUBLAS_COMPUTE_32F_FAST_TF32); off: CUBLAS_COMPUTE_32F.
  bool tf32 = false;
};

enum class DenseProduct {
  kForward,          // A = W, B = x, C = y
  kBackwardData,     // A = W, B = dy, C = dx
  kBackwardWeights,  // A = dy, B = x, C = dW
};

// The parameters of `p` for batch n, input width d and units u.
GemmShape DenseGemm(DenseProduct p, int64_t n, int64_t d, int64_t u);

// The workspace cuBLASLt may use (llm.c's choice).
inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// One fp32 cuBLASLt matmul of a fixed GemmShape.
class LtGemm {
 public:
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Creates the descriptors (host only). INVALID_ARGUMENT for a shape with
  // a dimension < 1 or a leading dimension too small; INTERNAL with
  // cuBLASLt's status name otherwise.
  static absl::StatusOr<std::unique_ptr<LtGemm>> Create(const GemmShape& g);

  // C = op(A) op(B), overwriting C (beta = 0), on ctx->stream().
  // The first call picks the algorithm for the operands' alignment
  // (parameters are views into a flat buffer, 64-byte aligned, while
  // cuBLASLt's heuristic assumes 256 unless told), and a call
  // with less aligned operands picks again; INTERNAL when cuBLASLt has none.
  absl::Status Run(DeviceContext* ctx, const float* a, const float* b, float* c);

  const GemmShape& shape() const { return g_; }

 private:
  explicit LtGemm(const GemmShape& g) : g_(g) {}
  // Picks the fastest algorithm the heuristic offers for operands aligned
  // to `align` bytes.
  absl::Status PickAlgorithm(cublasLtHandle_t h, uint32_t align);

  GemmShape g_;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  bool have_algo_ = false;
  uint32_t algo_align_ = 0;  // the operand alignment algo_ was picked for
};

}  // namespace yoke::engine::cuda

#endif  // YOKE_ENGINE_KERNELS_CUDA_MATMUL_H_
