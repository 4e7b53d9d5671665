#include "engine/kernels/cpu/gemm.h"

#include <cmath>
#include <vector>

#include "engine/testing/random.h"
#include "gtest/gtest.h"

namespace yoke::engine::cpu {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed) { return testing::UniformVector(n, seed, 1); }

// C = op(A) op(B) in double, from the definitions of the layouts in gemm.h.
std::vector<double> Reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                              const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p];
        const double bv = tb ? b[j * k + p] : b[p * n + j];
        s += av * bv;
      }
      c[i * n + j] = s;
    }
  return c;
}

struct Shape {
  int64_t m, n, k;
};

class MatmulPlanTest : public ::testing::TestWithParam<std::tuple<bool, bool, Shape>> {};

TEST_P(MatmulPlanTest, EqualsTheProductOfTheTransposedOperands) {
  const auto [ta, tb, s] = GetParam();
  const std::vector<float> a = Random(s.m * s.k, 1), b = Random(s.k * s.n, 2);
  auto plan = MatmulPlan::Create(ta, tb, s.m, s.n, s.k);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE((*plan)->Matches(ta, tb, s.m, s.n, s.k));
  EXPECT_FALSE((*plan)->Matches(!ta, tb, s.m, s.n, s.k));
  EXPECT_FALSE((*plan)->Matches(ta, tb, s.m, s.n + 1, s.k));
  std::vector<float> c(static_cast<size_t>(s.m * s.n), 7.0f), g(c.size());
  ASSERT_TRUE((*plan)->Run(a.data(), b.data(), c.data()).ok());
  ASSERT_TRUE(Sgemm(ta, tb, s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, g.data()).ok());
  const std::vector<double> r = Reference(ta, tb, s.m, s.n, s.k, a, b);
  const double tol = 1e-5 * std::sqrt(static_cast<double>(s.k)) + 1e-6;
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_NEAR(c[i], r[i], tol) << "plan, element " << i;
    ASSERT_NEAR(g[i], r[i], tol) << "sgemm, element " << i;
  }
  // A second run on other operands: the plan keeps no data of the first.
  const std::vector<float> a2 = Random(s.m * s.k, 3);
  ASSERT_TRUE((*plan)->Run(a2.data(), b.data(), c.data()).ok());
  const std::vector<double> r2 = Reference(ta, tb, s.m, s.n, s.k, a2, b);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], r2[i], tol) << i;
}

INSTANTIATE_TEST_SUITE_P(Layouts, MatmulPlanTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(Shape{5, 3, 7}, Shape{37, 64, 300})));

// The shape the zoo CNN's dense backward runs (dense.cc), where oneDNN
// picks another kernel than for small shapes.
INSTANTIATE_TEST_SUITE_P(ZooCnnDenseBackward, MatmulPlanTest,
                         ::testing::Values(std::make_tuple(false, true, Shape{3136, 64, 1024})));

TEST(MatmulPlanTest, RejectsAnEmptyShape) {
  auto plan = MatmulPlan::Create(false, true, 0, 4, 4);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("0x4x4"), std::string::npos) << plan.status();
}

}  // namespace
}  // namespace yoke::engine::cpu
