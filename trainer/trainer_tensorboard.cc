// Trainer: TensorBoard event files, written by global rank 0 (trainer.h).
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "config/config.h"
#include "jobspec/job_validate.h"
#include "spdlog/spdlog.h"
#include "trainer/trainer.h"

namespace yoke::worker {
namespace {

// Writes `scalars` at `step`; on the first failure logs it and returns false.
bool WriteScalars(common::EventFileWriter& w, int64_t step,
                  const std::vector<std::pair<const char*, double>>& scalars) {
  for (const auto& [tag, value] : scalars) {
    if (absl::Status s = w.WriteScalar(tag, step, static_cast<float>(value)); !s.ok()) {
      spdlog::warn("TensorBoard: {}; no more events are written for this run",
                   std::string(s.message()));
      return false;
    }
  }
  if (absl::Status s = w.Flush(); !s.ok()) {
    spdlog::warn("TensorBoard: {}; no more events are written for this run",
                 std::string(s.message()));
    return false;
  }
  return true;
}

}  // namespace

void Trainer::OpenEventFile() {
  if (options_.first_rank != 0) return;
  const std::string dir = common::TensorBoardDir(spec_);
  if (dir.empty()) return;
  auto w = common::EventFileWriter::Create(dir);
  if (!w.ok()) {
    spdlog::warn("TensorBoard: {}; training goes on without event files",
                 std::string(w.status().message()));
    return;
  }
  // The job's hyperparameters: the whole spec, as TensorBoard's text tab
  // shows it (Markdown; indented four spaces, a code block).
  std::string text;
  for (absl::string_view line : absl::StrSplit(common::JobSpecToYaml(spec_), '\n')) {
    absl::StrAppend(&text, "    ", line, "\n");
  }
  if (absl::Status s = (*w)->WriteText("hparams/spec", step_, text); !s.ok()) {
    spdlog::warn("TensorBoard: {}; training goes on without event files", std::string(s.message()));
    return;
  }
  spdlog::info("TensorBoard event file: {}", (*w)->path());
  events_ = std::move(*w);
}

void Trainer::WriteStepEvents(const v1::StepProgress& p) {
  if (!events_) return;
  if (!WriteScalars(*events_, p.step(),
                    {{"train/loss", p.loss()},
                     {"train/accuracy", p.accuracy()},
                     {"train/learning_rate", p.lr()},
                     {"train/samples_per_second", p.samples_per_second()}})) {
    events_.reset();
  }
}

void Trainer::WriteEpochEvents(int64_t step, const v1::EpochResult& e) {
  if (!events_) return;
  std::vector<std::pair<const char*, double>> scalars = {
      {"epoch/epoch", static_cast<double>(e.epoch())},
      {"epoch/train_loss", e.train_loss()},
      {"epoch/train_accuracy", e.train_accuracy()}};
  if (test_) {
    scalars.push_back({"epoch/test_loss", e.test_loss()});
    scalars.push_back({"epoch/test_accuracy", e.test_accuracy()});
  }
  if (validation_) {
    scalars.push_back({"validation/loss", e.validation_loss()});
    scalars.push_back({"validation/accuracy", e.validation_accuracy()});
  }
  if (!WriteScalars(*events_, step, scalars)) events_.reset();
}

}  // namespace yoke::worker
