// What a trainer measures about its steps, shared by the trainer (which
// counts), the worker (which exports them to Prometheus) and the CLI (which
// shows them): the step-duration histogram's buckets and the split of a
// step's time.
#ifndef YOKE_TELEMETRY_TRAIN_METRICS_H_
#define YOKE_TELEMETRY_TRAIN_METRICS_H_

#include <array>
#include <string>

#include "proto/yoke/v1/metrics.pb.h"

namespace yoke::common {

// Upper bounds of yoke_step_seconds' buckets, in seconds: 1 ms to 60 s,
// about 2.5x apart (a CPU MLP step is a few ms, a ResNet-50 step seconds).
inline constexpr std::array<double, 14> kStepSecondsBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60};

// Adds one step of `seconds` to `counts` (kStepSecondsBuckets.size() + 1
// entries, the last for +Inf; resized if short).
void CountStepSeconds(double seconds, google::protobuf::RepeatedField<int64_t>* counts);

// The mean step of a progress report, split: compute, data wait and exposed
// allreduce, in seconds; all zero when the report has no steps.
struct StepBreakdown {
  double step = 0, compute = 0, data_wait = 0, allreduce_exposed = 0, allreduce_total = 0;
};
StepBreakdown BreakdownOf(const v1::StepProgress& p);

// "step 12.3 ms: compute 9.1 ms (74%), data wait 0.4 ms (3%), exposed
// allreduce 2.8 ms (23%); allreduce 5.1 ms in all, 45% hidden", or "" when
// the report has no steps.
std::string FormatBreakdown(const StepBreakdown& b);

// An epoch's figures: "train loss 0.4123 acc 0.8512[ | validation loss ...
// acc ...] | test loss 0.4321 acc 0.8467 | 5210 samples/s, 11.5s", the
// validation part only with a validation split (`yoke train`, `yoke get`
// and `yoke watch` print it after "epoch N: " or "epoch N done: ").
std::string FormatEpoch(const v1::EpochResult& e);

// What early stopping decided, for a result line: " | stopped early, best
// epoch 3 (dir/best.ckpt)", " | best epoch 5" or "".
std::string FormatBestEpoch(const v1::TrainResult& r);

}  // namespace yoke::common

#endif  // YOKE_TELEMETRY_TRAIN_METRICS_H_
