// Progress reporting from the trainer.
//
// The trainer calls a ProgressSink on every logged step, at the end of every
// epoch, and once with the final result. ConsoleProgress renders for people:
// a redrawn one-line bar on a terminal, or plain log lines otherwise (a file,
// a pipe, CI). The worker daemon will implement the same interface to send
// progress to the coordinator.
//
// Thread-safety: the trainer calls a sink from one thread.
#ifndef YOKE_WORKER_PROGRESS_H_
#define YOKE_WORKER_PROGRESS_H_

#include <chrono>
#include <cstdio>
#include <string>

#include "proto/yoke/v1/metrics.pb.h"

namespace yoke {

class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  // Free-form information (model summary, data sizes, resume point).
  virtual void OnInfo(const std::string& line) {}
  virtual void OnStep(const v1::StepProgress& p) {}
  virtual void OnEpoch(const v1::EpochResult& e) {}
  virtual void OnFinish(const v1::TrainResult& r) {}
};

class ConsoleProgress final : public ProgressSink {
 public:
  // Writes to `out`. When `tty` is true the step line is redrawn in place
  // (at most 10 times a second); otherwise one line per logged step.
  ConsoleProgress(FILE* out, bool tty) : out_(out), tty_(tty) {}
  void OnInfo(const std::string& line) override;
  void OnStep(const v1::StepProgress& p) override;
  void OnEpoch(const v1::EpochResult& e) override;
  void OnFinish(const v1::TrainResult& r) override;

 private:
  void ClearBar();
  FILE* out_;
  bool tty_;
  bool bar_visible_ = false;
  std::chrono::steady_clock::time_point last_draw_{};
};

// "1:02:03" / "4:05".
std::string FormatDuration(double seconds);

}  // namespace yoke

#endif  // YOKE_WORKER_PROGRESS_H_
