#ifndef YOKE_COMMON_OMP_ENV_H_
#define YOKE_COMMON_OMP_ENV_H_

#include <optional>
#include <string>

namespace yoke::common {

// How long a trainer's idle OpenMP threads spin before they sleep.
//
// libgomp's default spins about 300,000 times (a millisecond or so) at the
// end of every parallel region. On cores that nothing else wants, that saves
// a wake-up; on a machine shared with other work, or in a container whose
// CPU quota the spinning burns, a thread spins while the one it waits for
// has no core, and a training step gets several times slower
// (bench/README.md, "OpenMP spinning"). Trainers are started with this
// shorter spin instead.
inline constexpr int kTrainerGompSpinCount = 10000;

// "GOMP_SPINCOUNT=<kTrainerGompSpinCount>" for the environment of a trainer
// about to be started, or nothing when the user chose a policy already
// (OMP_WAIT_POLICY or GOMP_SPINCOUNT set in this process's environment).
// libgomp reads these when it loads, so they must be in the environment the
// trainer starts with.
std::optional<std::string> TrainerOmpSpinEnv();

}  // namespace yoke::common

#endif  // YOKE_COMMON_OMP_ENV_H_
