#include "telemetry/progress_bar.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace yoke::common {

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string ProgressBarText(const v1::StepProgress& p) {
  constexpr int kWidth = 24;
  const double frac =
      p.steps_per_epoch() > 0
          ? std::clamp(static_cast<double>(p.step_in_epoch()) / p.steps_per_epoch(), 0.0, 1.0)
          : 0.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar(filled, '#');
  bar.append(kWidth - filled, '.');
  return absl::StrFormat("epoch %d/%d [%s] %d/%d  loss %.4f  %.0f samples/s  ETA %s", p.epoch() + 1,
                         p.epochs(), bar, p.step_in_epoch(), p.steps_per_epoch(), p.loss(),
                         p.samples_per_second(), FormatDuration(p.eta_seconds()));
}

bool RedrawnLine::Draw(const std::string& text, bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && last_draw_.has_value() && now - *last_draw_ < min_interval_) return false;
  last_draw_ = now;
  std::fprintf(out_, "\r\033[K%s", text.c_str());
  visible_ = true;
  return true;
}

void RedrawnLine::Clear() {
  if (visible_) {
    std::fputs("\r\033[K", out_);
    visible_ = false;
  }
}

}  // namespace yoke::common
