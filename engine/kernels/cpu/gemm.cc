#include "engine/kernels/cpu/gemm.h"

#include "absl/strings/str_cat.h"
#include "dnnl.h"

namespace yoke::engine::cpu {

absl::Status Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                   float alpha, const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return absl::OkStatus();
  int64_t lda = trans_a ? m : k;
  int64_t ldb = trans_b ? k : n;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                                alpha, a, lda, b, ldb, beta, c, n);
  if (st != dnnl_success) {
    return absl::InternalError(absl::StrCat("dnnl_sgemm(", m, "x", n, "x", k,
                                            ") failed with status ", st));
  }
  return absl::OkStatus();
}

}  // namespace yoke::engine::cpu
