#include "trainer/progress.h"

#include <string>

#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "telemetry/train_metrics.h"

namespace yoke::worker {

void ConsoleProgress::OnInfo(const std::string& line) {
  bar_.Clear();
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void ConsoleProgress::OnStep(const v1::StepProgress& p) {
  if (tty_) {
    // The last step of an epoch is always drawn, so the bar ends full.
    if (!bar_.Draw(common::ProgressBarText(p), p.step_in_epoch() == p.steps_per_epoch())) return;
  } else {
    std::fprintf(out_,
                 "epoch %lld/%lld step %lld/%lld (global %lld)  loss %.4f  acc %.4f  "
                 "lr %.4g  %.0f samples/s  ETA %s\n",
                 static_cast<long long>(p.epoch() + 1), static_cast<long long>(p.epochs()),
                 static_cast<long long>(p.step_in_epoch()),
                 static_cast<long long>(p.steps_per_epoch()), static_cast<long long>(p.step()),
                 p.loss(), p.accuracy(), p.lr(), p.samples_per_second(),
                 common::FormatDuration(p.eta_seconds()).c_str());
  }
  std::fflush(out_);
}

void ConsoleProgress::OnEpoch(const v1::EpochResult& e) {
  bar_.Clear();
  std::fprintf(out_, "epoch %lld done: %s\n", static_cast<long long>(e.epoch()),
               common::FormatEpoch(e).c_str());
  std::fflush(out_);
}

void ConsoleProgress::OnFinish(const v1::TrainResult& r) {
  bar_.Clear();
  std::fprintf(out_,
               "finished: %lld epochs, %lld steps | test accuracy %.4f, test loss %.4f | "
               "%.0f samples/s (training) | peak memory %.0f MiB%s%s%s\n",
               static_cast<long long>(r.epochs()), static_cast<long long>(r.steps()),
               r.test_accuracy(), r.test_loss(), r.samples_per_second(),
               r.peak_memory_bytes() / 1048576.0, r.checkpoint().empty() ? "" : " | checkpoint ",
               r.checkpoint().c_str(), common::FormatBestEpoch(r).c_str());
  std::fflush(out_);
}

std::string TrainerEventToJson(const v1::TrainerEvent& event) {
  google::protobuf::util::JsonPrintOptions jo;
  jo.preserve_proto_field_names = true;
  // Every field of the set message appears, so readers need no defaults.
  jo.always_print_primitive_fields = true;
  std::string json;
  // Printing a well-formed message cannot fail; an empty object would still
  // parse on the reading side.
  if (!google::protobuf::util::MessageToJsonString(event, &json, jo).ok()) json = "{}";
  return json;
}

void EventProgress::Write(const v1::TrainerEvent& event) {
  std::string line = TrainerEventToJson(event);
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

void EventProgress::OnInfo(const std::string& line) {
  v1::TrainerEvent ev;
  ev.set_info(line);
  Write(ev);
}

void EventProgress::OnStep(const v1::StepProgress& p) {
  v1::TrainerEvent ev;
  *ev.mutable_step() = p;
  Write(ev);
}

void EventProgress::OnEpoch(const v1::EpochResult& e) {
  v1::TrainerEvent ev;
  *ev.mutable_epoch() = e;
  Write(ev);
}

void EventProgress::OnFinish(const v1::TrainResult& r) {
  v1::TrainerEvent ev;
  *ev.mutable_result() = r;
  Write(ev);
}

void EventProgress::OnError(const std::string& message) {
  v1::TrainerEvent ev;
  ev.set_error(message);
  Write(ev);
}

}  // namespace yoke::worker
