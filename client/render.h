// How the `yoke` CLI shows jobs and workers to people: aligned tables, a
// job's details, durations and ages, and the live view of `yoke watch` (a
// redrawn progress bar on a terminal, plain lines otherwise). Also the JSON
// form every command prints with --output json (proto field names, as in
// the .proto files, so scripts can rely on them).
//
// The progress bar is the trainer's (telemetry/progress_bar.h).
//
// Thread-safety: the free functions are pure; a WatchView is used by one
// thread.
#ifndef YOKE_CLIENT_RENDER_H_
#define YOKE_CLIENT_RENDER_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "proto/yoke/v1/coordinator.pb.h"
#include "telemetry/progress_bar.h"

namespace yoke::client {

// "PENDING", "RUNNING", ... (the enum name without its JOB_/ATTEMPT_ prefix).
std::string JobStateName(v1::JobState s);
std::string AttemptStateName(v1::AttemptState s);
// Parses "running" / "RUNNING" / "JOB_RUNNING"; INVALID_ARGUMENT-style
// message in *error listing the known names when unknown.
bool ParseJobState(const std::string& text, v1::JobState* out, std::string* error);
// Compact age of `then_ms` at `now_ms`: "12s", "5m", "3h", "2d"; "-" when
// then_ms is 0 (unset).
std::string FormatAge(int64_t now_ms, int64_t then_ms);
int64_t NowMs();

// Columns separated by two spaces, each as wide as its widest cell; the
// last column is not padded. The first row is the header.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// ID, NAME, STATE, PROGRESS, ACCURACY, AGE, REASON.
std::string JobsTable(const std::vector<v1::Job>& jobs, int64_t now_ms);
// ID, HOST, DEVICES, STATE, RUNNING, LAST HEARTBEAT.
std::string WorkersTable(const std::vector<v1::Worker>& workers, int64_t now_ms);
// Multi-line description of one job: spec summary, state, progress,
// attempts with their assignments, epoch history, final result.
std::string JobDetails(const v1::Job& job, int64_t now_ms);
// "epoch 2/5 step 100/938" from the job's latest progress ("-" if none).
std::string ProgressSummary(const v1::Job& job);
// The final metrics line printed when a job succeeds.
std::string ResultSummary(const v1::TrainResult& r);

// One line of JSON, proto field names, defaults omitted.
std::string ToJson(const google::protobuf::Message& m);
// A JSON array of `items`, one element per line.
template <typename M>
std::string ToJsonArray(const std::vector<M>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i == 0 ? "\n  " : ",\n  ") + ToJson(items[i]);
  }
  out += items.empty() ? "]" : "\n]";
  return out;
}

// The live view of `yoke watch`: feed it every JobEvent. It prints state
// changes (with the reason), finished epochs, and progress: on a
// terminal a bar redrawn in place (at most 10 times a second), otherwise a
// plain line at most every `plain_interval`.
class WatchView {
 public:
  WatchView(FILE* out, bool tty,
            std::chrono::milliseconds plain_interval = std::chrono::milliseconds(5000))
      : out_(out), tty_(tty), plain_interval_(plain_interval) {}
  void OnEvent(const v1::JobEvent& ev);
  // Prints a free-form note ("lost the coordinator, reconnecting"), clearing
  // the bar first.
  void Note(const std::string& line);
  // Clears the bar, so that what follows starts on a clean line.
  void Close();

 private:
  FILE* out_;
  bool tty_;
  std::chrono::milliseconds plain_interval_;
  common::RedrawnLine bar_{out_};
  bool seen_ = false;
  v1::JobState last_state_ = v1::JOB_STATE_UNSPECIFIED;
  int32_t last_epoch_printed_ = 0;  // the highest epoch printed
  int64_t last_step_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace yoke::client

#endif  // YOKE_CLIENT_RENDER_H_
