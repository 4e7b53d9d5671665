// The one-line training progress bar, shared by the trainer's console
// output (trainer/progress.h) and the live view of `yoke watch`
// (client/render.h), so both draw the same line:
//
//   epoch 2/5 [######..................] 250/938  loss 0.4321  1234 samples/s  ETA 1:05
//
// On a terminal the line is redrawn in place ("\r" and erase-line) by a
// RedrawnLine, at most 10 times a second.
//
// Thread-safety: the free functions are pure; a RedrawnLine is used by one
// thread.
#ifndef YOKE_TELEMETRY_PROGRESS_BAR_H_
#define YOKE_TELEMETRY_PROGRESS_BAR_H_

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include "proto/yoke/v1/metrics.pb.h"

namespace yoke::common {

// "1:02:03" / "4:05" (seconds rounded); "?" for a negative or non-finite
// value (an ETA not known yet).
std::string FormatDuration(double seconds);

// The bar's text for `p` (no "\r", no newline). The bar is 24 characters,
// filled in proportion to step_in_epoch / steps_per_epoch (clamped to
// [0, 1]; empty when steps_per_epoch is 0).
std::string ProgressBarText(const v1::StepProgress& p);

// A line of `out` that is redrawn in place.
class RedrawnLine {
 public:
  explicit RedrawnLine(FILE* out,
                       std::chrono::milliseconds min_interval = std::chrono::milliseconds(100))
      : out_(out), min_interval_(min_interval) {}

  // Replaces the line with `text`, unless the last draw was less than
  // `min_interval` ago and `force` is false. Returns whether it drew. Does
  // not flush.
  bool Draw(const std::string& text, bool force = false);
  // Erases the line if one is drawn, so that what is printed next starts on
  // a clean line.
  void Clear();

 private:
  FILE* out_;
  std::chrono::milliseconds min_interval_;
  bool visible_ = false;
  std::optional<std::chrono::steady_clock::time_point> last_draw_;  // none yet: draw
};

}  // namespace yoke::common

#endif  // YOKE_TELEMETRY_PROGRESS_BAR_H_
