#include "telemetry/epoch_history.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace yoke::common {
namespace {

// Keeps the first and last entries of `history` and those whose epoch is a
// multiple of the smallest power of two S >= 2 that leaves at most half of
// `max_entries`: the history at an even spacing S. Each S is a multiple of
// the one before, so the entries a thinning keeps were all still there.
void ThinHistory(size_t max_entries, google::protobuf::RepeatedPtrField<v1::EpochResult>* history) {
  const int n = history->size();
  int64_t largest = 1;
  for (const v1::EpochResult& e : *history) {
    largest = std::max<int64_t>(largest, std::abs(e.epoch()));
  }
  auto kept = [&](int i, int64_t s) {
    return i == 0 || i == n - 1 || history->Get(i).epoch() % s == 0;
  };
  int64_t s = 2;
  for (; s <= largest; s *= 2) {
    size_t count = 0;
    for (int i = 0; i < n; ++i) count += kept(i, s) ? 1 : 0;
    if (count <= max_entries / 2) break;
  }
  int k = 0;
  for (int i = 0; i < n; ++i) {
    if (kept(i, s)) history->SwapElements(k++, i);
  }
  history->DeleteSubrange(k, n - k);
}

}  // namespace

void MergeEpoch(const v1::EpochResult& e, size_t max_entries,
                google::protobuf::RepeatedPtrField<v1::EpochResult>* history) {
  auto position = [history](int64_t epoch) {
    return std::lower_bound(history->begin(), history->end(), epoch,
                            [](const v1::EpochResult& h, int64_t of) { return h.epoch() < of; });
  };
  auto at = position(e.epoch());
  if (at != history->end() && at->epoch() == e.epoch()) {
    *at = e;
    return;
  }
  if (max_entries > 0 && static_cast<size_t>(history->size()) >= max_entries) {
    ThinHistory(max_entries, history);
    at = position(e.epoch());
  }
  const int index = static_cast<int>(at - history->begin());
  *history->Add() = e;
  for (int i = history->size() - 1; i > index; --i) history->SwapElements(i, i - 1);
}

void MergeEpochs(const google::protobuf::RepeatedPtrField<v1::EpochResult>& epochs,
                 size_t max_entries, google::protobuf::RepeatedPtrField<v1::EpochResult>* history) {
  for (const v1::EpochResult& e : epochs) MergeEpoch(e, max_entries, history);
}

}  // namespace yoke::common
