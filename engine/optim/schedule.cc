#include "engine/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/name_list.h"

namespace yoke::engine {
namespace {

constexpr double kPi = 3.14159265358979323846;

enum class Type { kConstant, kStep, kCosine };

class Schedule final : public LrSchedule {
 public:
  Schedule(Type type, double base, int64_t warmup, int64_t step_size, double gamma, double min_lr,
           int64_t total)
      : type_(type),
        base_(base),
        warmup_(warmup),
        step_size_(step_size),
        gamma_(gamma),
        min_lr_(min_lr),
        total_(total) {}

  float Lr(int64_t step) const override {
    step = std::max<int64_t>(step, 0);
    double lr = base_;
    switch (type_) {
      case Type::kConstant:
        break;
      case Type::kStep:
        lr = base_ * std::pow(gamma_, static_cast<double>(step / step_size_));
        break;
      case Type::kCosine: {
        const int64_t span = total_ - warmup_;
        const double p = span <= 0
                             ? 0.0  // the run ends within the warmup: no decay
                             : std::clamp(static_cast<double>(step - warmup_) / span, 0.0, 1.0);
        lr = min_lr_ + (base_ - min_lr_) * 0.5 * (1.0 + std::cos(kPi * p));
        break;
      }
    }
    if (step < warmup_) lr *= static_cast<double>(step + 1) / warmup_;
    return static_cast<float>(lr);
  }

 private:
  Type type_;
  double base_;
  int64_t warmup_, step_size_;
  double gamma_, min_lr_;
  int64_t total_;
};

absl::Status ScheduleField(const std::string& field, const std::string& what, double got) {
  return absl::InvalidArgumentError(
      absl::StrCat("training.schedule.", field, ": ", what, ", got ", got));
}

struct ScheduleEntry {
  std::string_view name;
  Type type;
};

// One type per name of kSchedules, in its order.
constexpr ScheduleEntry kTypes[] = {
    {"constant", Type::kConstant},
    {"step", Type::kStep},
    {"cosine", Type::kCosine},
};
static_assert(common::NamesMatch(kTypes, kSchedules),
              "kTypes must cover exactly kSchedules (engine/names/engine_names.h), in its order");

// The type `name` names ("" is constant); nullptr for an unknown name.
const ScheduleEntry* FindType(const std::string& name) {
  const std::string_view n = name.empty() ? std::string_view("constant") : name;
  for (const ScheduleEntry& e : kTypes) {
    if (n == e.name) return &e;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LrSchedule>> CreateSchedule(const v1::ScheduleSpec& spec,
                                                           float base_lr, int64_t total_steps) {
  const ScheduleEntry* entry = FindType(spec.type());
  if (entry == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.schedule.type: unknown schedule '", spec.type(),
                     "' (known: ", absl::StrJoin(KnownSchedules(), ", "), ")"));
  }
  const Type type = entry->type;
  if (spec.warmup_steps() < 0) {
    return ScheduleField("warmup_steps", "must be >= 0", spec.warmup_steps());
  }
  // proto3 cannot tell an unset gamma from 0, and 0 would zero the rate.
  const double gamma = spec.gamma() == 0.0f ? 0.1 : spec.gamma();
  if (type == Type::kStep) {
    if (spec.step_size() <= 0) {
      return ScheduleField("step_size", "must be > 0 for type 'step'", spec.step_size());
    }
    if (!(gamma > 0.0) || !std::isfinite(gamma)) {
      return ScheduleField("gamma", "must be finite and > 0", gamma);
    }
  }
  if (type == Type::kCosine && !(spec.min_lr() >= 0.0f && spec.min_lr() <= base_lr)) {
    return ScheduleField("min_lr", absl::StrCat("must be in [0, lr = ", base_lr, "]"),
                         spec.min_lr());
  }
  return std::unique_ptr<LrSchedule>(new Schedule(
      type, base_lr, spec.warmup_steps(), spec.step_size(), gamma, spec.min_lr(), total_steps));
}

}  // namespace yoke::engine
