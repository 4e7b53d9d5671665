// FakeClock: a Clock for tests that starts at a fixed instant and only moves
// when Advance() or Set() is called.
//
// Thread-safety: may be used from any thread.
#ifndef YOKE_COMMON_TESTING_FAKE_CLOCK_H_
#define YOKE_COMMON_TESTING_FAKE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace yoke::common {

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

#endif  // YOKE_COMMON_TESTING_FAKE_CLOCK_H_
