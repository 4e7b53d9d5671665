#include "engine/kernels/cuda/matmul.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda/cublas_check.h"

namespace yoke::engine::cuda {

GemmShape DenseGemm(DenseProduct p, int64_t n, int64_t d, int64_t u) {
  GemmShape g;
  switch (p) {
    case DenseProduct::kForward:  // y^T (U, N) = W^T (U, D) x^T (D, N)
      g.m = u, g.n = n, g.k = d;
      g.lda = u, g.ldb = d, g.ldc = u;
      break;
    case DenseProduct::kBackwardData:  // dx^T (D, N) = (W^T)^T (D, U) dy^T (U, N)
      g.transa = true;
      g.m = d, g.n = n, g.k = u;
      g.lda = u, g.ldb = u, g.ldc = d;
      break;
    case DenseProduct::kBackwardWeights:  // dW^T (U, D) = dy^T (U, N) (x^T)^T (N, D)
      g.transb = true;
      g.m = u, g.n = d, g.k = n;
      g.lda = u, g.ldb = d, g.ldc = u;
      break;
  }
  return g;
}

namespace {

absl::Status CheckShape(const GemmShape& g) {
  const int64_t a_rows = g.transa ? g.k : g.m, b_rows = g.transb ? g.n : g.k;
  if (g.m < 1 || g.n < 1 || g.k < 1 || g.lda < a_rows || g.ldb < b_rows || g.ldc < g.m) {
    return absl::InvalidArgumentError(absl::StrCat("cuda::LtGemm: bad shape m=", g.m, " n=", g.n,
                                                   " k=", g.k, " lda=", g.lda, " ldb=", g.ldb,
                                                   " ldc=", g.ldc));
  }
  return absl::OkStatus();
}

// The largest power of two (at most 256) dividing p's address.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

}  // namespace

LtGemm::~LtGemm() {
  if (c_ != nullptr) cublasLtMatrixLayoutDestroy(c_);
  if (b_ != nullptr) cublasLtMatrixLayoutDestroy(b_);
  if (a_ != nullptr) cublasLtMatrixLayoutDestroy(a_);
  if (op_ != nullptr) cublasLtMatmulDescDestroy(op_);
}

absl::StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(const GemmShape& g) {
  if (absl::Status s = CheckShape(g); !s.ok()) return s;
  std::unique_ptr<LtGemm> lt(new LtGemm(g));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(
      &lt->op_, g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = g.transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = g.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(lt->op_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(lt->op_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Layouts as stored: rows, columns, leading dimension (column-major).
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt->a_, CUDA_R_32F, g.transa ? g.k : g.m,
                                                    g.transa ? g.m : g.k, g.lda));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt->b_, CUDA_R_32F, g.transb ? g.n : g.k,
                                                    g.transb ? g.k : g.n, g.ldb));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt->c_, CUDA_R_32F, g.m, g.n, g.ldc));
  return lt;
}

absl::Status LtGemm::PickAlgorithm(cublasLtHandle_t h, uint32_t align) {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kLtWorkspaceBytes;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
    }
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(h, op_, a_, b_, c_, c_, pref, 1, &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_RETURN_IF_ERROR(st);
  if (found == 0) {
    return absl::InternalError(absl::StrCat("cuda::LtGemm: cuBLASLt has no algorithm for m=", g_.m,
                                            " n=", g_.n, " k=", g_.k, " transa=", g_.transa,
                                            " transb=", g_.transb, " alignment=", align));
  }
  algo_ = result.algo;
  have_algo_ = true;
  algo_align_ = align;
  return absl::OkStatus();
}

absl::Status LtGemm::Run(DeviceContext* ctx, const float* a, const float* b, float* c) {
  absl::StatusOr<cublasLtHandle_t> h = ctx->cublaslt();
  if (!h.ok()) return h.status();
  const uint32_t align = std::min({Alignment(a), Alignment(b), Alignment(c)});
  if (!have_algo_ || align < algo_align_) {
    if (absl::Status s = PickAlgorithm(*h, align); !s.ok()) return s;
  }
  absl::StatusOr<void*> ws = ctx->Workspace(kLtWorkspaceBytes, "cuBLASLt matmul");
  if (!ws.ok()) return ws.status();
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(*h, op_, &alpha, a, a_, b, b_, &beta, c, c_, c, c_, &algo_,
                                        *ws, kLtWorkspaceBytes, ctx->stream()));
  return absl::OkStatus();
}

}  // namespace yoke::engine::cuda
