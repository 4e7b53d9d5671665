// Clock: the time source of the control plane (heartbeat deadlines, job
// timestamps), behind an interface so tests drive time by hand.
//
// RealClock reads the system clock; tests use FakeClock
// (common/testing/fake_clock.h).
//
// Thread-safety: implementations may be used from any thread.
#ifndef YOKE_COMMON_CLOCK_H_
#define YOKE_COMMON_CLOCK_H_

#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace yoke::common {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Milliseconds since the Unix epoch, the unit of every *_ms proto field.
  int64_t NowMs() const { return absl::ToUnixMillis(Now()); }
};

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // A process-wide instance (stateless, so sharing it is free).
  static RealClock* Get() {
    static RealClock* clock = new RealClock;
    return clock;
  }
};

}  // namespace yoke::common

#endif  // YOKE_COMMON_CLOCK_H_
