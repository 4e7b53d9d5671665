// Host checks of the CUDA optimizers that need no device: the
// hyper-parameter errors of CreateOptimizer's makers, the types and state
// names (which checkpoints share with the CPU optimizers), and the refusal
// of parameters that are not on a CUDA device. Their arithmetic is tested in
// engine/kernels/cuda/math/optim_math_test.cc.
#include <string>
#include <vector>

#include "engine/optim/cuda/cuda_optimizers.h"
#include "gtest/gtest.h"

namespace yoke::engine::cuda {
namespace {

v1::OptimizerSpec Spec(const std::string& type) {
  v1::OptimizerSpec s;
  s.set_type(type);
  s.set_lr(0.1f);
  return s;
}

std::vector<std::string> StateNames(const Optimizer& o) {
  std::vector<std::string> names;
  for (const auto& [name, t] : o.State()) names.push_back(name);
  return names;
}

TEST(CudaOptimizersHostTest, HyperParameterErrors) {
  EXPECT_EQ(CreateCudaOptimizer(Spec("sgd"), nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ParamSet params;
  params.Declare("l/w", {3}, Init::Constant(0));
  ASSERT_TRUE(params.Finalize().ok());
  v1::OptimizerSpec s = Spec("sgd");
  s.set_momentum(1.0f);
  const absl::Status m = CreateCudaOptimizer(s, &params).status();
  EXPECT_EQ(m.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.message().find("training.optimizer.momentum"), std::string::npos) << m;
  s = Spec("adam");
  s.set_beta2(1.5f);
  EXPECT_NE(CreateCudaOptimizer(s, &params).status().message().find("beta2"), std::string::npos);
  s = Spec("adamw");
  s.set_epsilon(-1.0f);
  EXPECT_NE(CreateCudaOptimizer(s, &params).status().message().find("epsilon"), std::string::npos);
}

// Made over a CPU ParamSet (its state then lives on the CPU), so that the
// types and names show without a device; Step refuses such parameters.
TEST(CudaOptimizersHostTest, TypesStateNamesAndDeviceCheck) {
  ParamSet params;
  params.Declare("l/w", {3}, Init::Constant(0));
  ASSERT_TRUE(params.Finalize().ok());
  v1::OptimizerSpec s = Spec("sgd");
  auto plain = CreateCudaOptimizer(s, &params);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_STREQ((*plain)->type(), "sgd");
  EXPECT_TRUE(StateNames(**plain).empty());
  s.set_momentum(0.9f);
  auto momentum = CreateCudaOptimizer(s, &params);
  ASSERT_TRUE(momentum.ok());
  EXPECT_EQ(StateNames(**momentum), std::vector<std::string>{"momentum"});
  for (const std::string type : {"adam", "adamw"}) {
    auto adam = CreateCudaOptimizer(Spec(type), &params);
    ASSERT_TRUE(adam.ok()) << adam.status();
    EXPECT_EQ((*adam)->type(), type);
    EXPECT_EQ(StateNames(**adam), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
    EXPECT_EQ((*adam)->Step(0.1f).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*adam)->step_count(), 0);
  }
  EXPECT_EQ((*momentum)->Step(0.1f).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaGradNorm(params, 1.0f).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace yoke::engine::cuda
