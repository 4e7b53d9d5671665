#include "engine/optim/optimizer.h"

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
      {"sgd", [](v1::OptimizerSpec* s) { s->set_nesterov(true); }, "training.optimizer.momentum"},
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
  EXPECT_EQ(CreateOptimizer(spec, &p).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace yoke::engine
