// StageRunner: one pipeline stage's part of a training step.
//
// A stage holds some of the model's layers (engine::Model::CreateStage). A
// step splits the batch into micro-batches (MicroBatchSizes) and runs the
// stage's actions of a verified schedule (BuildSchedule + VerifySchedule,
// pipeline/schedule.h) in order: receive, forward, send; receive, backward,
// send. The first stage reads the batch's inputs, the last its labels and
// the loss; the stages between see only their neighbours' messages.
//
// What a step leaves behind equals one rank accumulating the same
// micro-batches: each micro-batch's loss gradient is scaled by 1 / (the
// step's samples), so a short micro-batch weighs by its sample count, and
// the parameter gradients are summed over micro-batches in the order the
// trainer's accumulation sums them (micro-batches 0..m-2 into a buffer, then
// the last one's gradient plus that buffer). The caller then steps its
// optimizer on the stage's parameters (the mean is already taken).
//
// Memory: the model keeps as many activation sets as the schedule has
// micro-batches in flight on this stage (VerifySchedule's peak: under 1F1B
// at most the stage count, under GPipe the micro-batch count).
//
// Thread-safety: one runner per stage, used by one thread.
#ifndef YOKE_PIPELINE_RUNTIME_STAGE_RUNNER_H_
#define YOKE_PIPELINE_RUNTIME_STAGE_RUNNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/layer.h"
#include "engine/losses/loss.h"
#include "engine/model.h"
#include "pipeline/runtime/transport.h"
#include "pipeline/schedule.h"

namespace yoke::pipeline {

// What a stage computes, as the runner drives it: its part of the model
// (ModelCompute), or a stand-in of fixed cost (bench/pipeline_bubble_bench).
class StageCompute {
 public:
  virtual ~StageCompute() = default;
  // Per example, without the batch dimension.
  virtual const engine::Shape& input_shape() const = 0;
  virtual const engine::Shape& output_shape() const = 0;
  // Room for k forwards whose backwards have not run (activation sets).
  virtual absl::Status KeepInFlight(int k) = 0;
  virtual int in_flight_capacity() const = 0;
  // The bytes its activations hold now, over every micro-batch in flight
  // (0 where it keeps none).
  virtual int64_t held_activation_bytes() const { return 0; }
  // As engine::Model's, with ctx.activation_set naming the micro-batch's set.
  virtual absl::StatusOr<engine::Tensor> Forward(const engine::Tensor& x,
                                                 const engine::LayerContext& ctx) = 0;
  virtual absl::Status Backward(const engine::Tensor& dout, const engine::LayerContext& ctx) = 0;
  // After Backward: the input's gradient (stages after the first).
  virtual const engine::Tensor& input_grad() const = 0;
  // The flat parameter gradients Backward overwrote (summed over
  // micro-batches by the runner); undefined when there are none.
  virtual engine::Tensor grads() = 0;
};

// A stage's part of the model (engine::Model::CreateStage); not owned.
class ModelCompute final : public StageCompute {
 public:
  explicit ModelCompute(engine::Model* model) : model_(model) {}
  const engine::Shape& input_shape() const override { return model_->input_shape(); }
  const engine::Shape& output_shape() const override { return model_->output_shape(); }
  absl::Status KeepInFlight(int k) override { return model_->SetActivationSets(k); }
  int in_flight_capacity() const override { return model_->activation_sets(); }
  int64_t held_activation_bytes() const override { return model_->HeldActivationBytes(); }
  absl::StatusOr<engine::Tensor> Forward(const engine::Tensor& x,
                                         const engine::LayerContext& ctx) override {
    return model_->Forward(x, ctx);
  }
  absl::Status Backward(const engine::Tensor& dout, const engine::LayerContext& ctx) override {
    return model_->Backward(dout, ctx);
  }
  const engine::Tensor& input_grad() const override { return model_->input_grad(); }
  engine::Tensor grads() override { return model_->params().flat_grads(); }

 private:
  engine::Model* model_;
};

struct StageOptions {
  int stage = 0;
  int stages = 1;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int micro_batches = 1;  // m: a step's batch is split into at most m
  // The loss gradient of the per-sample sum (scale 1) instead of the step's
  // mean: for a caller that divides by a count over several pipelines
  // (the data-parallel reducer's).
  bool sum_loss = false;
};

class StageRunner {
 public:
  // `model` is this stage's part (not owned; it must outlive the runner),
  // `loss` the job's loss (the last stage only; null elsewhere). Builds and
  // verifies the schedule for options.micro_batches: FAILED_PRECONDITION
  // from VerifySchedule, INVALID_ARGUMENT for options out of range or a
  // missing or extra loss.
  static absl::StatusOr<std::unique_ptr<StageRunner>> Create(engine::Model* model,
                                                             engine::Loss* loss,
                                                             const StageOptions& options);
  // The same for any StageCompute (owned by the runner).
  static absl::StatusOr<std::unique_ptr<StageRunner>> Create(std::unique_ptr<StageCompute> compute,
                                                             engine::Loss* loss,
                                                             const StageOptions& options);

  struct StepResult {
    double loss_sum = 0;     // last stage: the step's summed loss
    int64_t correct = 0;     // last stage: arg-max hits
    int micro_batches = 0;   // how many the step ran
    int peak_in_flight = 0;  // the most forwards held at once this step
    // The stage's activation bytes after its fullest forward: measured from
    // the buffers it holds, not computed from the schedule.
    int64_t peak_activation_bytes = 0;
    // Wall time in forwards, backwards and the loss (busy), and in receives
    // (waiting on a neighbour): the stage's timeline, from which
    // bench/pipeline_bubble_bench measures the bubble.
    double busy_seconds = 0, wait_seconds = 0;
  };

  // One step of `batch` samples. x: (batch, input...) on the first stage,
  // else null; labels: (batch) i32 on the last stage, else null. `ctx`
  // gives the seed, replica and training mode; its step is the trainer's
  // step, and micro-batch j runs with step * micro_batches + j (the
  // accumulating trainer's dropout streams). A step shorter than the
  // micro-batch count (an epoch's last) runs fewer micro-batches, with a
  // schedule verified when first needed. Leaves the step's gradient in the
  // model's parameter gradients.
  absl::StatusOr<StepResult> Step(const engine::Tensor* x, const engine::Tensor* labels,
                                  int64_t batch, Transport& transport,
                                  const engine::LayerContext& ctx);

  // The verified schedule's peak of micro-batches in flight on this stage
  // for `micro_batches` (the activation sets the model keeps).
  int planned_in_flight() const { return planned_in_flight_; }

 private:
  struct Plan {
    std::vector<Action> actions;
    int in_flight = 0;
  };
  StageRunner(std::unique_ptr<StageCompute> compute, engine::Loss* loss,
              const StageOptions& options)
      : model_(std::move(compute)), loss_(loss), opt_(options) {}
  absl::StatusOr<const Plan*> PlanFor(int micro_batches);
  // A buffer of `n` examples of `shape` from `store` (grown when short).
  static absl::StatusOr<engine::Tensor> Sized(engine::Tensor* store, int64_t n,
                                              const engine::Shape& shape, const char* what);
  absl::Status Accumulate(int micro_batch, int micro_batches);

  std::unique_ptr<StageCompute> model_;
  engine::Loss* loss_;
  StageOptions opt_;
  std::map<int, Plan> plans_;  // by micro-batch count
  int planned_in_flight_ = 0;
  // Per activation set: the received input, the loss gradient (last stage)
  // and the received output gradient, each with its storage.
  std::vector<engine::Tensor> x_store_, dlogits_store_, dout_store_;
  engine::Tensor sum_;  // the gradient accumulation buffer
};

}  // namespace yoke::pipeline

#endif  // YOKE_PIPELINE_RUNTIME_STAGE_RUNNER_H_
