// Host checks of the cuBLASLt dense products (matmul.h), no device needed:
// a column-major reference GEMM that reads DenseGemm's exact parameters
// (m, n, k, transposes, leading dimensions) over Yoke's row-major buffers
// must reproduce the CPU dense layer's forward, dx and dW; and cuBLASLt
// accepts the descriptors LtGemm creates for every shape.
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/kernels/cuda/matmul.h"
#include "engine/layer.h"
#include "engine/param_set.h"
#include "engine/registry.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

// C = op(A) op(B) (beta = 0), column-major, exactly as cuBLASLt reads g.
void ReferenceGemm(const GemmShape& g, const float* a, const float* b, float* c) {
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      double s = 0.0;
      for (int64_t p = 0; p < g.k; ++p) {
        const float av = g.transa ? a[p + i * g.lda] : a[i + p * g.lda];
        const float bv = g.transb ? b[j + p * g.ldb] : b[p + j * g.ldb];
        s += static_cast<double>(av) * bv;
      }
      c[i + j * g.ldc] = static_cast<float>(s);
    }
  }
}

void ExpectNear(const float* got, const float* want, int64_t n, const std::string& what) {
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::abs(want[i]))) << what << " at " << i;
  }
}

struct Dense {
  std::unique_ptr<Layer> layer;
  ParamSet params;
};

// The CPU dense layer (no bias: the bias is the layer's own kernel) with
// random parameters.
void MakeCpuDense(int64_t d, int64_t u, Dense* out) {
  v1::LayerSpec spec;
  spec.mutable_dense()->set_units(static_cast<int32_t>(u));
  spec.mutable_dense()->set_no_bias(true);
  absl::StatusOr<std::unique_ptr<Layer>> layer = LayerRegistry::Global().Create(spec);
  ASSERT_TRUE(layer.ok()) << layer.status();
  out->layer = *std::move(layer);
  out->layer->set_name("d");
  ASSERT_TRUE(out->layer->Build({{d}}, &out->params).ok());
  ASSERT_TRUE(out->params.Finalize().ok());
  testing::FillUniform(out->params.value(0), 7, d * 100 + u);
}

TEST(MatmulHostTest, ReferenceGemmOnDenseGemmParametersMatchesTheCpuDenseLayer) {
  const int64_t u = 5;
  for (int64_t n : {1, 3}) {
    for (int64_t d : {1, 7}) {
      SCOPED_TRACE(absl::StrCat("N=", n, " D=", d, " U=", u));
      Dense cpu;
      MakeCpuDense(d, u, &cpu);
      Tensor x = Tensor::Empty({n, d}), y = Tensor::Empty({n, u});
      Tensor dy = Tensor::Empty({n, u}), dx = Tensor::Empty({n, d});
      testing::FillUniform(x, 1, n * 10 + d);
      testing::FillUniform(dy, 2, n * 10 + d);
      LayerContext lc;
      ASSERT_TRUE(cpu.layer->Forward({&x}, &y, lc).ok());
      ASSERT_TRUE(cpu.layer->Backward({&x}, y, dy, {&dx}, lc).ok());
      const float* w = cpu.params.value(0).data<float>();

      std::vector<float> got(n * u);
      ReferenceGemm(DenseGemm(DenseProduct::kForward, n, d, u), w, x.data<float>(), got.data());
      ExpectNear(got.data(), y.data<float>(), n * u, "y");

      got.assign(n * d, 0.0f);
      ReferenceGemm(DenseGemm(DenseProduct::kBackwardData, n, d, u), w, dy.data<float>(),
                    got.data());
      ExpectNear(got.data(), dx.data<float>(), n * d, "dx");

      got.assign(d * u, 0.0f);
      ReferenceGemm(DenseGemm(DenseProduct::kBackwardWeights, n, d, u), dy.data<float>(),
                    x.data<float>(), got.data());
      ExpectNear(got.data(), cpu.params.grad(0).data<float>(), d * u, "dW");
    }
  }
}

TEST(MatmulHostTest, CublasLtAcceptsTheDescriptorsOfEveryProduct) {
  for (int64_t n : {1, 3, 64}) {
    for (int64_t d : {1, 7, 3136}) {
      for (DenseProduct p :
           {DenseProduct::kForward, DenseProduct::kBackwardData, DenseProduct::kBackwardWeights}) {
        absl::StatusOr<std::unique_ptr<LtGemm>> lt = LtGemm::Create(DenseGemm(p, n, d, 5));
        EXPECT_TRUE(lt.ok()) << "N=" << n << " D=" << d << ": " << lt.status();
      }
    }
  }
}

TEST(MatmulHostTest, CreateRefusesAnEmptyOrInconsistentShape) {
  GemmShape g = DenseGemm(DenseProduct::kForward, 0, 3, 5);
  EXPECT_EQ(LtGemm::Create(g).status().code(), absl::StatusCode::kInvalidArgument);
  g = DenseGemm(DenseProduct::kForward, 2, 3, 5);
  g.lda = 4;  // A is (5, 3): lda must be >= 5
  EXPECT_EQ(LtGemm::Create(g).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace yoke::engine::cuda
