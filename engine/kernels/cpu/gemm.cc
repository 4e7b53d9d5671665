#include "engine/kernels/cpu/gemm.h"

#include "absl/strings/str_cat.h"
#include "dnnl.h"
#include "engine/kernels/cpu/dnnl_context.h"

namespace yoke::engine::cpu {

absl::Status Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return absl::OkStatus();
  int64_t lda = trans_a ? m : k;
  int64_t ldb = trans_b ? k : n;
  dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                                ldb, beta, c, n);
  if (st != dnnl_success) {
    return absl::InternalError(
        absl::StrCat("dnnl_sgemm(", m, "x", n, "x", k, ") failed with status ", st));
  }
  return absl::OkStatus();
}

struct MatmulPlan::Impl {
  dnnl::memory::desc a, b, c;
  dnnl::matmul prim;
};

MatmulPlan::~MatmulPlan() = default;

absl::StatusOr<std::unique_ptr<MatmulPlan>> MatmulPlan::Create(bool trans_a, bool trans_b,
                                                               int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("matmul plan: empty shape ", m, "x", n, "x", k));
  }
  using dnnl::memory;
  std::unique_ptr<MatmulPlan> p(new MatmulPlan());
  p->trans_a_ = trans_a;
  p->trans_b_ = trans_b;
  p->m_ = m;
  p->n_ = n;
  p->k_ = k;
  auto impl = std::make_unique<Impl>();
  // Transposed operands are the same buffers read with swapped strides.
  impl->a = memory::desc({m, k}, memory::data_type::f32,
                         trans_a ? memory::dims{1, m} : memory::dims{k, 1});
  impl->b = memory::desc({k, n}, memory::data_type::f32,
                         trans_b ? memory::dims{1, k} : memory::dims{n, 1});
  impl->c = memory::desc({m, n}, memory::data_type::f32, memory::dims{n, 1});
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(impl->a, impl->b, impl->c), CpuEngine());
    impl->prim = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("matmul plan ", m, "x", n, "x", k, ": oneDNN: ", e.what()));
  }
  p->impl_ = std::move(impl);
  return p;
}

absl::Status MatmulPlan::Run(const float* a, const float* b, float* c) {
  try {
    dnnl::memory am(impl_->a, CpuEngine(), const_cast<float*>(a));
    dnnl::memory bm(impl_->b, CpuEngine(), const_cast<float*>(b));
    dnnl::memory cm(impl_->c, CpuEngine(), c);
    impl_->prim.execute(CpuStream(),
                        {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    CpuStream().wait();
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("matmul ", m_, "x", n_, "x", k_, ": oneDNN: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace yoke::engine::cpu
