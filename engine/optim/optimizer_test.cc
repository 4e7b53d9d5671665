#include "engine/optim/optimizer.h"

#include <sys/resource.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

absl::Status CreateStatus(const v1::OptimizerSpec& spec) {
  ParamSet p;
  p.Declare("w", {4}, Init::Constant(1));
  EXPECT_TRUE(p.Finalize().ok());
  return CreateOptimizer(spec, &p).status();
}

TEST(OptimizerTest, CreatesEveryKnownType) {
  EXPECT_EQ(KnownOptimizers(), (std::vector<std::string>{"sgd", "adam", "adamw"}));
  for (const std::string& type : KnownOptimizers()) {
    ParamSet p;
    p.Declare("w", {4}, Init::Constant(1));
    EXPECT_TRUE(p.Finalize().ok());
    v1::OptimizerSpec spec;
    spec.set_type(type);
    spec.set_lr(0.01f);
    auto o = CreateOptimizer(spec, &p);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ((*o)->type(), type);
    EXPECT_EQ((*o)->step_count(), 0);
  }
}

TEST(OptimizerTest, UnknownTypeNamesFieldAndKnownValues) {
  v1::OptimizerSpec spec;
  spec.set_lr(0.1f);
  for (const char* type : {"rmsprop", ""}) {
    spec.set_type(type);
    absl::Status s = CreateStatus(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(s.message());
    EXPECT_NE(msg.find("training.optimizer.type"), std::string::npos) << msg;
    EXPECT_NE(msg.find("sgd, adam, adamw"), std::string::npos) << msg;
    EXPECT_NE(msg.find(type), std::string::npos) << msg;
  }
}

TEST(OptimizerTest, RejectsOutOfRangeHyperParameters) {
  struct Case {
    const char* type;
    void (*mutate)(v1::OptimizerSpec*);
    const char* field;
  } cases[] = {
      {"sgd", [](v1::OptimizerSpec* s) { s->set_lr(0); }, "training.optimizer.lr"},
      {"adam", [](v1::OptimizerSpec* s) { s->set_lr(-1); }, "training.optimizer.lr"},
      {"sgd", [](v1::OptimizerSpec* s) { s->set_momentum(1.5f); }, "training.optimizer.momentum"},
      {"sgd", [](v1::OptimizerSpec* s) { s->set_weight_decay(-0.1f); },
       "training.optimizer.weight_decay"},
      {"adam", [](v1::OptimizerSpec* s) { s->set_beta1(1.0f); }, "training.optimizer.beta1"},
      {"adamw", [](v1::OptimizerSpec* s) { s->set_beta2(-0.5f); }, "training.optimizer.beta2"},
      {"adam", [](v1::OptimizerSpec* s) { s->set_epsilon(-1e-8f); }, "training.optimizer.epsilon"},
  };
  for (const Case& c : cases) {
    v1::OptimizerSpec spec;
    spec.set_type(c.type);
    spec.set_lr(0.1f);
    c.mutate(&spec);
    absl::Status s = CreateStatus(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(std::string(s.message()).find(c.field), std::string::npos) << s;
  }
}

TEST(OptimizerTest, RequiresFinalizedParams) {
  ParamSet p;
  p.Declare("w", {4}, Init::Constant(1));
  v1::OptimizerSpec spec;
  spec.set_type("sgd");
  spec.set_lr(0.1f);
  EXPECT_EQ(CreateOptimizer(spec, &p).status().code(), absl::StatusCode::kFailedPrecondition);
}

// The process's virtual memory size in bytes (VmSize), 0 if unknown.
size_t VirtualBytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  }
  return 0;
}

// Parameters that fit, optimizer state that does not: an error naming the
// state, not an abort (the trainer turns it into exit 1 and the reason).
TEST(OptimizerTest, StateThatDoesNotFitIsAnErrorNamingIt) {
#if defined(__SANITIZE_ADDRESS__) || defined(__has_feature)
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
  GTEST_SKIP() << "RLIMIT_AS cannot bound an ASan process (its shadow memory is reserved)";
#endif
#endif
  constexpr int64_t kFloats = int64_t{64} << 20;  // 256 MiB of parameters
  for (const char* type : {"sgd", "adam"}) {
    ParamSet p;
    p.Declare("w", {kFloats}, Init::Constant(0));
    ASSERT_TRUE(p.Finalize().ok());
    v1::OptimizerSpec spec;
    spec.set_type(type);
    spec.set_lr(0.01f);
    spec.set_momentum(0.9f);
    rlimit saved;
    ASSERT_EQ(getrlimit(RLIMIT_AS, &saved), 0);
    const size_t now = VirtualBytes();
    ASSERT_GT(now, 0u);
    rlimit tight = saved;
    tight.rlim_cur = now + (size_t{64} << 20);  // room for small things only
    ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
    auto o = CreateOptimizer(spec, &p);
    ASSERT_EQ(setrlimit(RLIMIT_AS, &saved), 0);
    ASSERT_FALSE(o.ok()) << type;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kResourceExhausted) << o.status();
    EXPECT_NE(o.status().message().find("out of memory: 268435456 bytes for optimizer"),
              std::string::npos)
        << o.status();
    // With the limit lifted the same optimizer is created.
    EXPECT_TRUE(CreateOptimizer(spec, &p).ok()) << type;
  }
}

// The norm spans every parameter (and skips nothing but zero padding): 3, 4
// in two entries make 5; the gradient scale multiplies it.
TEST(OptimizerTest, GradNormIsTheGlobalL2NormOfTheScaledGradient) {
  ParamSet p;
  const int a = p.Declare("a", {3}, Init::Constant(0));
  const int b = p.Declare("b", {1}, Init::Constant(0));
  ASSERT_TRUE(p.Finalize().ok());
  float* g = p.flat_grads().data<float>();
  g[p.entries()[a].offset] = 3.0f;
  g[p.entries()[b].offset] = -4.0f;
  EXPECT_DOUBLE_EQ(GradNorm(p, 1.0f), 5.0);
  EXPECT_DOUBLE_EQ(GradNorm(p, 0.5f), 2.5);
}

TEST(OptimizerTest, ClipFactorFollowsClipGradNorm) {
  EXPECT_FLOAT_EQ(ClipFactor(5.0, 1.0f), static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_LT(5.0 * ClipFactor(5.0, 1.0f), 1.0);
  EXPECT_EQ(ClipFactor(5.0, 10.0f), 1.0f);  // under the bound: untouched
  EXPECT_EQ(ClipFactor(5.0, 5.0f), 1.0f);   // at the bound: untouched
  EXPECT_EQ(ClipFactor(5.0, 0.0f), 1.0f);   // 0 = off
}

}  // namespace
}  // namespace yoke::engine
