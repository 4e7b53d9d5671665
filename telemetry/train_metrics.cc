#include "telemetry/train_metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace yoke::common {

void CountStepSeconds(double seconds, google::protobuf::RepeatedField<int64_t>* counts) {
  const int n = static_cast<int>(kStepSecondsBuckets.size()) + 1;
  while (counts->size() < n) counts->Add(0);
  const auto it = std::lower_bound(kStepSecondsBuckets.begin(), kStepSecondsBuckets.end(), seconds);
  counts->Set(static_cast<int>(it - kStepSecondsBuckets.begin()),
              counts->Get(static_cast<int>(it - kStepSecondsBuckets.begin())) + 1);
}

StepBreakdown BreakdownOf(const v1::StepProgress& p) {
  StepBreakdown b;
  if (p.window_steps() <= 0) return b;
  const double n = static_cast<double>(p.window_steps());
  b.step = p.step_seconds() / n;
  b.data_wait = p.data_wait_seconds() / n;
  b.allreduce_exposed = p.allreduce_exposed_seconds() / n;
  b.allreduce_total = p.allreduce_seconds() / n;
  b.compute = std::max(0.0, b.step - b.data_wait - b.allreduce_exposed);
  return b;
}

std::string FormatBreakdown(const StepBreakdown& b) {
  if (b.step <= 0) return "";
  auto ms = [](double s) { return absl::StrFormat("%.1f ms", s * 1e3); };
  auto pct = [&](double s) { return absl::StrFormat("%.0f%%", 100.0 * s / b.step); };
  std::string out = absl::StrCat("step ", ms(b.step), ": compute ", ms(b.compute), " (",
                                 pct(b.compute), "), data wait ", ms(b.data_wait), " (",
                                 pct(b.data_wait), "), exposed allreduce ", ms(b.allreduce_exposed),
                                 " (", pct(b.allreduce_exposed), ")");
  if (b.allreduce_total > 0) {
    const double hidden = std::max(0.0, 1.0 - b.allreduce_exposed / b.allreduce_total);
    absl::StrAppend(&out, "; allreduce ", ms(b.allreduce_total), " in all, ",
                    absl::StrFormat("%.0f%%", 100.0 * hidden), " hidden behind backward");
  }
  return out;
}

std::string FormatEpoch(const v1::EpochResult& e) {
  // A validation split reports both figures; its accuracy and loss are never
  // both exactly 0, so zeros mean the job has none.
  std::string validation;
  if (e.validation_loss() != 0 || e.validation_accuracy() != 0) {
    validation = absl::StrFormat(" | validation loss %.4f acc %.4f", e.validation_loss(),
                                 e.validation_accuracy());
  }
  return absl::StrFormat(
      "train loss %.4f acc %.4f%s | test loss %.4f acc %.4f | %.0f samples/s, %.1fs",
      e.train_loss(), e.train_accuracy(), validation, e.test_loss(), e.test_accuracy(),
      e.samples_per_second(), e.seconds());
}

std::string FormatBestEpoch(const v1::TrainResult& r) {
  std::string out;
  if (r.stopped_early()) {
    out = absl::StrCat(" | stopped early, best epoch ", r.best_epoch());
  } else if (r.best_epoch() > 0) {
    out = absl::StrCat(" | best epoch ", r.best_epoch());
  }
  if (!r.best_checkpoint().empty()) absl::StrAppend(&out, " (", r.best_checkpoint(), ")");
  return out;
}

}  // namespace yoke::common
