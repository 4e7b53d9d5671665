// Host tests of the CUDA losses' functors (math/loss.h): run with
// HostForEach on random logits, they must give the CPU losses'
// (engine/losses/) loss_sum, correct count and dlogits bit for bit (on the
// host both use glibc's exp/log), and report the first bad label.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/kernels/cuda/math/host_for_each.h"
#include "engine/kernels/cuda/math/loss.h"
#include "engine/losses/loss.h"
#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

struct Batch {
  Tensor z, y;
};

// Random logits; with `ties`, rounded to steps of 0.5 so rows have equal
// maxima (the arg-max must be the first, as on the CPU).
Batch MakeBatch(int64_t n, int64_t k, bool ties, uint64_t seed) {
  Batch b{Tensor::Empty({n, k}), Tensor::Empty({n}, DType::kI32)};
  testing::FillUniform(b.z, seed, 1, -4.0f, 4.0f);
  if (ties) {
    for (int64_t i = 0; i < n * k; ++i) b.z.data<float>()[i] = std::round(b.z.data<float>()[i]);
  }
  std::vector<float> u = testing::UniformVector(n, seed, 2, 0.0f, static_cast<float>(k));
  for (int64_t i = 0; i < n; ++i) {
    b.y.data<int32_t>()[i] = std::min<int32_t>(static_cast<int32_t>(u[i]), k - 1);
  }
  return b;
}

struct Got {
  LossTotals totals;
  std::vector<float> dz;
};

// Runs the CUDA functors of `loss` (with a gradient) on the host.
Got RunFunctors(const std::string& loss, float eps, const Batch& b, float grad_scale) {
  const int64_t n = b.z.dim(0), k = b.z.dim(1);
  Got got{{}, std::vector<float>(n * k, -7.0f)};
  std::vector<double> row_loss(n, -1.0);
  std::vector<int32_t> row_flag(n, -1);
  const float* z = b.z.data<float>();
  const int32_t* y = b.y.data<int32_t>();
  if (loss == "mse") {
    HostForEach(n, MseRowFn{z, y, got.dz.data(), k, MseDScale(grad_scale, k), row_loss.data(),
                            row_flag.data()});
  } else {
    SoftmaxXentRowFn f{
        z, y, got.dz.data(), k, eps, 0.0, 0.0, grad_scale, row_loss.data(), row_flag.data()};
    f.SetTargets();
    HostForEach(n, f);
  }
  HostForEach(1, LossTotalsFn{row_loss.data(), row_flag.data(), y, n, &got.totals});
  return got;
}

void ExpectSameAsCpu(const std::string& loss, float eps, int64_t n, int64_t k, bool ties) {
  SCOPED_TRACE(::testing::Message()
               << loss << " eps " << eps << " N " << n << " K " << k << (ties ? " ties" : ""));
  const Batch b = MakeBatch(n, k, ties, 100 * n + k);
  const float scale = 1.0f / 3.0f;
  auto cpu = CreateLoss(loss, eps);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  Tensor dz = Tensor::Empty({n, k});
  auto want = (*cpu)->Compute(b.z, b.y, scale, &dz);
  ASSERT_TRUE(want.ok()) << want.status();
  const Got got = RunFunctors(loss, eps, b, scale);
  EXPECT_EQ(got.totals.loss_sum, want->loss_sum);  // bitwise: same order, same ops
  EXPECT_EQ(got.totals.correct, want->correct);
  EXPECT_EQ(got.totals.bad_row, -1);
  ASSERT_EQ(std::memcmp(got.dz.data(), dz.data<float>(), n * k * sizeof(float)), 0);
}

TEST(CudaLossMathTest, SoftmaxCrossEntropyEqualsCpu) {
  for (int64_t n : {1, 3, 17}) {
    for (int64_t k : {1, 3, 10}) {
      for (float eps : {0.0f, 0.1f}) {
        ExpectSameAsCpu("softmax_cross_entropy", eps, n, k, false);
        ExpectSameAsCpu("softmax_cross_entropy", eps, n, k, true);
      }
    }
  }
}

TEST(CudaLossMathTest, MseEqualsCpu) {
  for (int64_t n : {1, 3, 17}) {
    for (int64_t k : {1, 3, 10}) {
      ExpectSameAsCpu("mse", 0.0f, n, k, false);
      ExpectSameAsCpu("mse", 0.0f, n, k, true);
    }
  }
}

// The correct count is not trivially 0 or N on these batches, so a wrong
// arg-max or label index would show.
TEST(CudaLossMathTest, CorrectCountIsInformative) {
  const Batch b = MakeBatch(64, 3, false, 5);
  const Got got = RunFunctors("softmax_cross_entropy", 0.0f, b, 1.0f);
  EXPECT_GT(got.totals.correct, 0);
  EXPECT_LT(got.totals.correct, 64);
}

TEST(CudaLossMathTest, ReportsFirstBadLabel) {
  for (const std::string loss : {"softmax_cross_entropy", "mse"}) {
    Batch b = MakeBatch(5, 3, false, 9);
    b.y.data<int32_t>()[2] = 3;
    b.y.data<int32_t>()[4] = -1;
    const Got got = RunFunctors(loss, 0.0f, b, 1.0f);
    EXPECT_EQ(got.totals.bad_row, 2) << loss;
    EXPECT_EQ(got.totals.bad_label, 3) << loss;
    auto cpu = CreateLoss(loss, 0.0f);
    ASSERT_TRUE(cpu.ok());
    EXPECT_EQ((*cpu)->Compute(b.z, b.y, 1.0f, nullptr).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace yoke::engine::cuda
