#include "engine/optim/schedule.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace yoke::engine {
namespace {

std::unique_ptr<LrSchedule> Make(const std::string& type, int64_t warmup, float base, int64_t total,
                                 int64_t step_size = 0, float gamma = 0, float min_lr = 0) {
  v1::ScheduleSpec spec;
  spec.set_type(type);
  spec.set_warmup_steps(warmup);
  spec.set_step_size(step_size);
  spec.set_gamma(gamma);
  spec.set_min_lr(min_lr);
  auto s = CreateSchedule(spec, base, total);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

TEST(ScheduleTest, ConstantAndDefault) {
  auto c = Make("constant", 0, 0.3f, 100);
  EXPECT_FLOAT_EQ(c->Lr(0), 0.3f);
  EXPECT_FLOAT_EQ(c->Lr(1000000), 0.3f);
  auto d = Make("", 0, 0.3f, 100);
  EXPECT_FLOAT_EQ(d->Lr(57), 0.3f);
}

TEST(ScheduleTest, LinearWarmup) {
  // W = 4: 1/4, 2/4, 3/4, 4/4 of the rate, then the rate.
  auto c = Make("constant", 4, 0.8f, 100);
  EXPECT_FLOAT_EQ(c->Lr(0), 0.2f);
  EXPECT_FLOAT_EQ(c->Lr(1), 0.4f);
  EXPECT_FLOAT_EQ(c->Lr(3), 0.8f);
  EXPECT_FLOAT_EQ(c->Lr(4), 0.8f);
}

TEST(ScheduleTest, StepDecay) {
  auto s = Make("step", 0, 1.0f, 100, 10, 0.5f);
  EXPECT_FLOAT_EQ(s->Lr(0), 1.0f);
  EXPECT_FLOAT_EQ(s->Lr(9), 1.0f);
  EXPECT_FLOAT_EQ(s->Lr(10), 0.5f);
  EXPECT_FLOAT_EQ(s->Lr(25), 0.25f);
  // Unset gamma is 0.1.
  auto d = Make("step", 0, 1.0f, 100, 30);
  EXPECT_FLOAT_EQ(d->Lr(29), 1.0f);
  EXPECT_FLOAT_EQ(d->Lr(30), 0.1f);
  EXPECT_NEAR(d->Lr(60), 0.01f, 1e-9);
  // Warmup multiplies the decayed rate: step 1 of W = 2 is the full base.
  auto w = Make("step", 2, 1.0f, 100, 1, 0.5f);
  EXPECT_FLOAT_EQ(w->Lr(0), 0.5f * 1.0f);
  EXPECT_FLOAT_EQ(w->Lr(1), 1.0f * 0.5f);
}

TEST(ScheduleTest, Cosine) {
  // base 1, min 0.1 over 100 steps: half way is the mid point 0.55; the
  // quarter is 0.1 + 0.9 (1 + cos(pi/4)) / 2.
  auto c = Make("cosine", 0, 1.0f, 100, 0, 0, 0.1f);
  EXPECT_FLOAT_EQ(c->Lr(0), 1.0f);
  EXPECT_FLOAT_EQ(c->Lr(50), 0.55f);
  EXPECT_NEAR(c->Lr(25), 0.1 + 0.45 * (1 + std::sqrt(0.5)), 1e-6);
  EXPECT_FLOAT_EQ(c->Lr(100), 0.1f);
  EXPECT_FLOAT_EQ(c->Lr(500), 0.1f);
  // With warmup 10 of 110 steps, the decay spans steps 10..110.
  auto w = Make("cosine", 10, 1.0f, 110, 0, 0, 0.0f);
  EXPECT_FLOAT_EQ(w->Lr(4), 0.5f);
  EXPECT_FLOAT_EQ(w->Lr(9), 1.0f);
  EXPECT_FLOAT_EQ(w->Lr(10), 1.0f);
  EXPECT_FLOAT_EQ(w->Lr(60), 0.5f);
  EXPECT_NEAR(w->Lr(110), 0.0f, 1e-7);
  // A run cut short inside its warmup (max_steps 60, warmup 200) ramps and
  // never decays; it used to sit at min_lr (0) for every step.
  auto short_run = Make("cosine", 200, 0.1f, 60, 0, 0, 0.0f);
  EXPECT_FLOAT_EQ(short_run->Lr(0), 0.1f / 200);
  EXPECT_FLOAT_EQ(short_run->Lr(59), 0.1f * 60 / 200);
}

// CreateSchedule takes every name of its list (engine/names/engine_names.h,
// which job validation reads) and refuses every other one, listing them all.
TEST(ScheduleTest, CreatesExactlyTheListedTypes) {
  ASSERT_FALSE(KnownSchedules().empty());
  for (const std::string& type : KnownSchedules()) {
    v1::ScheduleSpec spec;
    spec.set_type(type);
    spec.set_step_size(10);  // what "step" needs; the others leave it alone
    auto s = CreateSchedule(spec, 0.5f, 100);
    ASSERT_TRUE(s.ok()) << type << ": " << s.status();
    EXPECT_FLOAT_EQ((*s)->Lr(0), 0.5f) << type;
  }
  for (const char* type : {"Constant", "cosine ", "linear", "exponential"}) {
    v1::ScheduleSpec spec;
    spec.set_type(type);
    auto s = CreateSchedule(spec, 0.5f, 100);
    ASSERT_FALSE(s.ok()) << "'" << type << "' was created";
    EXPECT_EQ(s.status().message(),
              absl::StrCat("training.schedule.type: unknown schedule '", type,
                           "' (known: ", absl::StrJoin(KnownSchedules(), ", "), ")"));
  }
}

TEST(ScheduleTest, ErrorsNameTheField) {
  struct Case {
    const char* type;
    int64_t warmup, step_size;
    float gamma, min_lr;
    const char* field;
  } cases[] = {
      {"linear", 0, 0, 0, 0, "training.schedule.type"},
      {"step", 0, 0, 0, 0, "training.schedule.step_size"},
      {"step", 0, 10, -0.5f, 0, "training.schedule.gamma"},
      {"constant", -1, 0, 0, 0, "training.schedule.warmup_steps"},
      {"cosine", 0, 0, 0, 2.0f, "training.schedule.min_lr"},
  };
  for (const Case& c : cases) {
    v1::ScheduleSpec spec;
    spec.set_type(c.type);
    spec.set_warmup_steps(c.warmup);
    spec.set_step_size(c.step_size);
    spec.set_gamma(c.gamma);
    spec.set_min_lr(c.min_lr);
    auto s = CreateSchedule(spec, 1.0f, 100);
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(s.status().message()).find(c.field), std::string::npos) << s.status();
  }
  v1::ScheduleSpec bad;
  bad.set_type("linear");
  const std::string msg(CreateSchedule(bad, 1.0f, 10).status().message());
  EXPECT_NE(msg.find("constant, step, cosine"), std::string::npos) << msg;
}

}  // namespace
}  // namespace yoke::engine
