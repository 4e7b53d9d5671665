#include "ps/staleness.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace yoke::ps {

StalenessGate::StalenessGate(Consistency mode, int64_t max_staleness)
    : bound_(mode == Consistency::kSync    ? 0
             : mode == Consistency::kAsync ? std::numeric_limits<int64_t>::max()
                                           : std::max<int64_t>(0, max_staleness)) {}

absl::Status StalenessGate::Join(int id) {
  if (clock_.count(id)) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", id, " has already joined"));
  }
  clock_[id] = SlowestClock();
  return absl::OkStatus();
}

absl::Status StalenessGate::JoinAt(int id, int64_t clock) {
  if (clock < 0)
    return absl::InvalidArgumentError(absl::StrCat("worker ", id, " joins at step ", clock));
  if (clock_.count(id)) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", id, " has already joined"));
  }
  clock_[id] = clock;
  return absl::OkStatus();
}

void StalenessGate::Leave(int id) { clock_.erase(id); }

absl::Status StalenessGate::Finished(int id, int64_t step) {
  auto it = clock_.find(id);
  if (it == clock_.end())
    return absl::NotFoundError(absl::StrCat("worker ", id, " has not joined"));
  if (step != it->second) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", id, " finished step ", step, " but is at step ", it->second));
  }
  ++it->second;
  return absl::OkStatus();
}

int64_t StalenessGate::Clock(int id) const {
  auto it = clock_.find(id);
  return it == clock_.end() ? -1 : it->second;
}

int64_t StalenessGate::SlowestClock() const {
  if (clock_.empty()) return 0;
  int64_t slowest = std::numeric_limits<int64_t>::max();
  for (const auto& [id, c] : clock_) slowest = std::min(slowest, c);
  return slowest;
}

bool StalenessGate::MayStart(int id) const {
  const int64_t c = Clock(id);
  if (c < 0) return false;
  // Its next step is c; the slowest's next is SlowestClock().
  return c - SlowestClock() <= bound_;
}

}  // namespace yoke::ps
