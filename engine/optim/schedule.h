// LrSchedule: the learning rate as a pure function of the global step.
//
// Being a function of the step alone (no internal state), a resumed run gets
// the same rates from the restored step count. `step` is 0-based: Lr(0) is
// the rate of the first update.
//   constant: base_lr
//   step:     base_lr * gamma^floor(step / step_size)     (gamma default 0.1)
//   cosine:   min_lr + (base_lr - min_lr) * (1 + cos(pi * p)) / 2, where
//             p = (step - warmup) / (total_steps - warmup), clamped to [0, 1]:
//             the decay starts when warmup ends and reaches min_lr at the
//             last step. A run that ends within its warmup (max_steps <=
//             warmup_steps) never decays: the ramp alone.
// With warmup_steps = W > 0 every type is multiplied by (step + 1) / W for
// step < W, a linear ramp whose last warmup step reaches the full rate.
//
// Thread-safety: immutable after creation; Lr() may be called concurrently.
#ifndef YOKE_ENGINE_OPTIM_SCHEDULE_H_
#define YOKE_ENGINE_OPTIM_SCHEDULE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/names/engine_names.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::engine {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // The rate for 0-based global step `step` (>= 0).
  virtual float Lr(int64_t step) const = 0;
};

// Creates the schedule `spec.type` names: any name of kSchedules
// (engine/names/engine_names.h, whose KnownSchedules() this header
// re-exports), or "" for constant. total_steps is the run's total number of
// updates (used by cosine). Errors: INVALID_ARGUMENT naming
// training.schedule.type (with the known values) or the offending field
// (warmup_steps, step_size, gamma, min_lr).
absl::StatusOr<std::unique_ptr<LrSchedule>> CreateSchedule(const v1::ScheduleSpec& spec,
                                                           float base_lr, int64_t total_steps);

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_OPTIM_SCHEDULE_H_
