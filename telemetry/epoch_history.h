// A job's epoch history kept bounded however many epochs it runs: the
// coordinator's copy in the job record, and the trainer's in its result and
// checkpoint header, merge their epochs through MergeEpochs.
#ifndef YOKE_TELEMETRY_EPOCH_HISTORY_H_
#define YOKE_TELEMETRY_EPOCH_HISTORY_H_

#include <cstddef>

#include "google/protobuf/repeated_ptr_field.h"
#include "proto/yoke/v1/metrics.pb.h"

namespace yoke::common {

// The entries a history keeps at most: an endless job of 8-step epochs (CI's
// soak) runs thousands of epochs a second, and every report and checkpoint
// carries the history.
inline constexpr size_t kMaxHistoryEpochs = 1000;

// Merges `epochs` into `history`, which stays in epoch order: an epoch
// already there (an attempt that resumed mid-epoch trains it again) is
// replaced in place, a new one goes where its number belongs (appended, as
// a rule: each costs O(1), and one out of order O(log n)). A history of
// `max_entries` (> 0) or more is first thinned to at most half as many: its
// first and newest entries, and the rest at an even spacing of epochs (a
// power of two). So a job of many short epochs keeps the shape of its whole
// history at bounded memory and a bounded write per report.
void MergeEpochs(const google::protobuf::RepeatedPtrField<v1::EpochResult>& epochs,
                 size_t max_entries, google::protobuf::RepeatedPtrField<v1::EpochResult>* history);

// MergeEpochs of the one epoch `e`.
void MergeEpoch(const v1::EpochResult& e, size_t max_entries,
                google::protobuf::RepeatedPtrField<v1::EpochResult>* history);

}  // namespace yoke::common

#endif  // YOKE_TELEMETRY_EPOCH_HISTORY_H_
