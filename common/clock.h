// Clock: the time source of the control plane (heartbeat deadlines, job
// timestamps), behind an interface so tests drive time by hand.
//
// RealClock reads the system clock. FakeClock starts at a fixed instant and
// only moves when Advance() or Set() is called.
//
// Thread-safety: both implementations may be used from any thread.
#ifndef YOKE_COMMON_CLOCK_H_
#define YOKE_COMMON_CLOCK_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
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

class FakeClock final : public Clock {
 public:
  // Starts at 2024-01-01T00:00:00Z so timestamps in tests are readable.
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1704067200)) : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace yoke::common

#endif  // YOKE_COMMON_CLOCK_H_
