// Progress reporting from the trainer.
//
// The trainer calls a ProgressSink on every logged step, at the end of every
// epoch, and once with the final result. ConsoleProgress renders for people:
// a redrawn one-line bar on a terminal (telemetry/progress_bar.h), or plain log lines otherwise (a
// file, a pipe, CI). EventProgress writes the machine-readable form the worker daemon reads from a
// child trainer: one v1::TrainerEvent per line, as JSON. TeeProgress sends every event to two
// sinks.
//
// Thread-safety: the trainer calls a sink from one thread.
#ifndef YOKE_TRAINER_PROGRESS_H_
#define YOKE_TRAINER_PROGRESS_H_

#include <cstdio>
#include <string>

#include "proto/yoke/v1/metrics.pb.h"
#include "telemetry/progress_bar.h"

namespace yoke::worker {

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
  ConsoleProgress(FILE* out, bool tty) : out_(out), tty_(tty), bar_(out) {}
  void OnInfo(const std::string& line) override;
  void OnStep(const v1::StepProgress& p) override;
  void OnEpoch(const v1::EpochResult& e) override;
  void OnFinish(const v1::TrainResult& r) override;

 private:
  FILE* out_;
  bool tty_;
  common::RedrawnLine bar_;  // the step line, on a terminal
};

// Writes each event as one line of JSON, a v1::TrainerEvent with snake_case
// field names ({"step": {...}}, {"epoch": {...}}, {"result": {...}},
// {"info": "..."}), flushed at once so a reading process sees it immediately.
class EventProgress final : public ProgressSink {
 public:
  explicit EventProgress(FILE* out) : out_(out) {}
  void OnInfo(const std::string& line) override;
  void OnStep(const v1::StepProgress& p) override;
  void OnEpoch(const v1::EpochResult& e) override;
  void OnFinish(const v1::TrainResult& r) override;
  // {"error": "message"}: the trainer failed; call before exiting non-zero.
  void OnError(const std::string& message);

 private:
  void Write(const v1::TrainerEvent& event);
  FILE* out_;
};

// Forwards every event to `a`, then `b` (neither owned; both must outlive it).
class TeeProgress final : public ProgressSink {
 public:
  TeeProgress(ProgressSink* a, ProgressSink* b) : a_(a), b_(b) {}
  void OnInfo(const std::string& line) override { a_->OnInfo(line), b_->OnInfo(line); }
  void OnStep(const v1::StepProgress& p) override { a_->OnStep(p), b_->OnStep(p); }
  void OnEpoch(const v1::EpochResult& e) override { a_->OnEpoch(e), b_->OnEpoch(e); }
  void OnFinish(const v1::TrainResult& r) override { a_->OnFinish(r), b_->OnFinish(r); }

 private:
  ProgressSink* a_;
  ProgressSink* b_;
};

// One line of JSON (no trailing newline) for `event`, as EventProgress writes
// it.
std::string TrainerEventToJson(const v1::TrainerEvent& event);

}  // namespace yoke::worker

#endif  // YOKE_TRAINER_PROGRESS_H_
