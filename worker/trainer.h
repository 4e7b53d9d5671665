// Trainer: runs one job's training loop in this process.
//
// This is where the engine, the data pipeline and (later) the collectives
// meet. `yoke train` runs it directly; the worker daemon will run it in a
// child process per attempt.
//
// A step: take the next batch from the prefetching pipeline (prepared on a
// background thread while the previous step computed), forward, loss,
// backward, optimizer update with the scheduled learning rate. The gradient
// of the loss is scaled by 1 / (samples in the global step), so a short last
// batch averages exactly. After each epoch the test split is evaluated (if
// the spec has one) and a checkpoint is written (if the spec names a
// directory); with checkpoint.every_steps, also every that many steps.
//
// Resume: a checkpoint holds the parameters, the state buffers, the optimizer
// state, the global step and the position in the epoch. Data order,
// augmentation and dropout masks are pure functions of (seed, epoch, step),
// so training N steps, saving, resuming and training M more is bit-identical
// to training N + M steps straight.
//
// Thread-safety: a Trainer is used from one thread; RequestStop() may be
// called from any thread (a signal handler's helper thread).
#ifndef YOKE_WORKER_TRAINER_H_
#define YOKE_WORKER_TRAINER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "proto/yoke/v1/job.pb.h"
#include "proto/yoke/v1/metrics.pb.h"
#include "worker/progress.h"

namespace yoke {

struct TrainerOptions {
  // Checkpoint file to continue from ("" starts fresh from the spec's seed).
  std::string resume;
  // Receives progress; may be null.
  ProgressSink* progress = nullptr;
};

class Trainer {
 public:
  // Validates the spec (ValidateJobSpec), opens the datasets, builds the
  // model, the loss and the optimizer, and restores `options.resume` if set.
  // Everything that can be wrong with the spec or the files fails here,
  // before any training: INVALID_ARGUMENT / NOT_FOUND naming the field or
  // file.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const v1::JobSpec& spec,
                                                         const TrainerOptions& options);
  ~Trainer();

  // Trains to the end of the spec (epochs, or training.max_steps), or until
  // RequestStop(); evaluates and checkpoints as the spec says.
  absl::StatusOr<v1::TrainResult> Run();

  // Asks Run() to stop after the current step (it then writes a checkpoint
  // if the spec has a directory, and returns the result so far).
  void RequestStop() { stop_.store(true); }

  // Evaluates the model on the test split: (mean loss, accuracy).
  absl::StatusOr<std::pair<double, double>> Evaluate();

  Model& model() { return *model_; }
  int64_t global_step() const { return step_; }
  // Writes a checkpoint of the current state to `path`.
  absl::Status SaveCheckpoint(const std::string& path);

 private:
  Trainer() = default;
  absl::Status Restore(const std::string& path);
  absl::Status MaybeCheckpoint(bool end_of_epoch);

  v1::JobSpec spec_;
  TrainerOptions options_;
  std::shared_ptr<data::Dataset> train_, test_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Loss> loss_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  int threads_ = 1;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  // Position: the next step runs batch `step_in_epoch_` of epoch `epoch_`.
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t step_in_epoch_ = 0;
  double train_seconds_ = 0;  // restored from checkpoints, for throughput
  int64_t samples_seen_ = 0;
  std::string last_checkpoint_;
  std::atomic<bool> stop_{false};
};

// Peak resident set size of this process, in bytes.
int64_t PeakRssBytes();

}  // namespace yoke

#endif  // YOKE_WORKER_TRAINER_H_
