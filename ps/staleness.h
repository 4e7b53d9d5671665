// When a parameter-server worker may start its next step.
//
// Each worker counts its steps (its clock). Under `sync` every worker's
// step t waits for every other worker's step t-1 (the PS averages one step
// of all of them, then they all pull); under `async` nobody waits; under
// `bounded` with staleness s, a worker may start step t only while t is at
// most s steps past the next step of the slowest worker, so what it pulls
// misses at most s steps of anyone's gradients. `sync` is `bounded` with
// s = 0. Workers that die leave the gate (the others stop waiting for
// them) and rejoin at the slowest live worker's clock.
//
// Thread-safety: not thread-safe; the PS task that owns it serialises calls.
#ifndef YOKE_PS_STALENESS_H_
#define YOKE_PS_STALENESS_H_

#include <cstdint>
#include <limits>
#include <map>

#include "absl/status/status.h"

namespace yoke::ps {

enum class Consistency { kSync, kAsync, kBounded };

class StalenessGate {
 public:
  // `max_staleness` counts only for kBounded (>= 0).
  StalenessGate(Consistency mode, int64_t max_staleness);

  // Worker `id` takes part from the slowest live worker's clock (0 when it
  // is the first). FAILED_PRECONDITION if it is already in.
  absl::Status Join(int id);
  // Worker `id` takes part from step `clock` (>= 0): a restarted worker at
  // the step its PS tasks agreed on. FAILED_PRECONDITION if it is already
  // in, INVALID_ARGUMENT for a negative clock.
  absl::Status JoinAt(int id, int64_t clock);
  // Worker `id` is gone (dead or finished): nobody waits for it.
  void Leave(int id);
  // Worker `id` finished step `step`: its clock is step + 1. Steps come in
  // order: INVALID_ARGUMENT for any other step, NOT_FOUND for a stranger.
  absl::Status Finished(int id, int64_t step);

  // The step worker `id` is at (its next step); -1 for a stranger.
  int64_t Clock(int id) const;
  // The slowest live worker's clock (0 with none).
  int64_t SlowestClock() const;
  // Whether worker `id` may start its next step now.
  bool MayStart(int id) const;
  // How many steps past the slowest a worker may run ahead (0 for sync,
  // "unbounded" for async).
  int64_t bound() const { return bound_; }

 private:
  int64_t bound_;
  std::map<int, int64_t> clock_;  // live worker -> its next step
};

}  // namespace yoke::ps

#endif  // YOKE_PS_STALENESS_H_
