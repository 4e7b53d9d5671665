#include "pipeline/runtime/stage_runner.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "pipeline/split.h"

namespace yoke::pipeline {

absl::StatusOr<std::unique_ptr<StageRunner>> StageRunner::Create(engine::Model* model,
                                                                 engine::Loss* loss,
                                                                 const StageOptions& options) {
  return Create(std::make_unique<ModelCompute>(model), loss, options);
}

absl::StatusOr<std::unique_ptr<StageRunner>> StageRunner::Create(
    std::unique_ptr<StageCompute> compute, engine::Loss* loss, const StageOptions& options) {
  if (options.stages < 1 || options.stage < 0 || options.stage >= options.stages) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: stage ", options.stage,
                                                   " is not one of ", options.stages, " stages"));
  }
  const bool last = options.stage == options.stages - 1;
  if (last != (loss != nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline: the last stage, and only it, computes the loss (stage ", options.stage, " of ",
        options.stages, (loss != nullptr ? " was given one)" : " was given none)")));
  }
  std::unique_ptr<StageRunner> r(new StageRunner(std::move(compute), loss, options));
  ASSIGN_OR_RETURN(const Plan* plan, r->PlanFor(options.micro_batches));
  r->planned_in_flight_ = plan->in_flight;
  return r;
}

absl::StatusOr<const StageRunner::Plan*> StageRunner::PlanFor(int micro_batches) {
  auto it = plans_.find(micro_batches);
  if (it != plans_.end()) return &it->second;
  ASSIGN_OR_RETURN(const auto schedule, BuildSchedule(opt_.schedule, opt_.stages, micro_batches));
  ASSIGN_OR_RETURN(const ScheduleStats stats, VerifySchedule(schedule, micro_batches));
  Plan plan;
  plan.actions = schedule[opt_.stage];
  plan.in_flight = std::max(stats.peak_in_flight[opt_.stage], 1);
  // The model keeps as many forwards as any schedule of this stage needs.
  if (plan.in_flight > model_->in_flight_capacity()) {
    RETURN_IF_ERROR(model_->KeepInFlight(plan.in_flight));
  }
  return &plans_.emplace(micro_batches, std::move(plan)).first->second;
}

absl::StatusOr<engine::Tensor> StageRunner::Sized(engine::Tensor* store, int64_t n,
                                                  const engine::Shape& shape, const char* what) {
  const int64_t need = n * engine::NumElements(shape);
  if (!store->defined() || store->numel() < need) {
    *store = engine::Tensor();
    ASSIGN_OR_RETURN(
        *store, engine::Tensor::Allocate({need}, engine::DType::kF32, engine::Device::CPU(), what));
  }
  engine::Shape s = shape;
  s.insert(s.begin(), n);
  return store->View(0, s);
}

absl::Status StageRunner::Accumulate(int micro_batch, int micro_batches) {
  const engine::Tensor g = model_->grads();
  if (micro_batches == 1 || !g.defined()) return absl::OkStatus();
  const int64_t total = g.numel();
  float* __restrict grads = g.data<float>();
  if (!sum_.defined()) {
    ASSIGN_OR_RETURN(sum_,
                     engine::Tensor::Allocate(g.shape(), engine::DType::kF32, engine::Device::CPU(),
                                              "the stage's gradient accumulation buffer"));
  }
  float* __restrict a = sum_.data<float>();
  if (micro_batch == 0) {
    std::copy(grads, grads + total, a);
  } else if (micro_batch < micro_batches - 1) {
#pragma omp parallel for simd if (total > 32768)
    for (int64_t i = 0; i < total; ++i) a[i] += grads[i];
  } else {
#pragma omp parallel for simd if (total > 32768)
    for (int64_t i = 0; i < total; ++i) grads[i] += a[i];
  }
  return absl::OkStatus();
}

absl::StatusOr<StageRunner::StepResult> StageRunner::Step(const engine::Tensor* x,
                                                          const engine::Tensor* labels,
                                                          int64_t batch, Transport& transport,
                                                          const engine::LayerContext& ctx) {
  const int s = opt_.stage;
  const bool first = s == 0, last = s == opt_.stages - 1;
  if (first != (x != nullptr) || last != (labels != nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline: stage ", s, " of ", opt_.stages,
        " takes the batch's inputs only on the first stage and its labels only on the last"));
  }
  if ((x != nullptr && (x->rank() < 1 || x->dim(0) != batch)) ||
      (labels != nullptr && labels->numel() != batch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: stage ", s, " was given a step of ", batch, " samples but ",
                     x != nullptr ? absl::StrCat(x->rank() < 1 ? 0 : x->dim(0), " inputs")
                                  : absl::StrCat(labels->numel(), " labels")));
  }
  ASSIGN_OR_RETURN(const std::vector<int> sizes,
                   MicroBatchSizes(static_cast<int>(batch), opt_.micro_batches));
  const int m = static_cast<int>(sizes.size());
  ASSIGN_OR_RETURN(const Plan* plan, PlanFor(m));
  std::vector<int64_t> begin(m, 0);
  for (int i = 1; i < m; ++i) begin[i] = begin[i - 1] + sizes[i - 1];
  const int sets = model_->in_flight_capacity();
  x_store_.resize(sets);
  dlogits_store_.resize(sets);
  dout_store_.resize(sets);
  std::vector<int> free_sets;
  for (int k = sets - 1; k >= 0; --k) free_sets.push_back(k);
  std::vector<int> set_of(m, -1);
  std::vector<engine::Tensor> x_in(m), out(m), dlogits(m), dout(m);
  const float scale = opt_.sum_loss ? 1.0f : 1.0f / static_cast<float>(batch);
  StepResult result;
  result.micro_batches = m;
  int in_flight = 0, next_backward = 0;
  for (const Action& a : plan->actions) {
    const int i = a.micro_batch;
    engine::LayerContext c = ctx;
    c.step = ctx.step * opt_.micro_batches + i;
    const auto t0 = std::chrono::steady_clock::now();
    switch (a.op) {
      case Op::kRecvActivation: {
        if (free_sets.empty()) {
          return absl::InternalError(absl::StrCat(
              "pipeline: stage ", s, " ran out of activation sets at micro-batch ", i));
        }
        set_of[i] = free_sets.back();
        free_sets.pop_back();
        ASSIGN_OR_RETURN(x_in[i], Sized(&x_store_[set_of[i]], sizes[i], model_->input_shape(),
                                        "a received activation"));
        RETURN_IF_ERROR(transport.Recv(s - 1, MessageKind::kActivation, i, &x_in[i]));
        break;
      }
      case Op::kForward: {
        if (first) {
          if (free_sets.empty()) {
            return absl::InternalError(absl::StrCat(
                "pipeline: stage ", s, " ran out of activation sets at micro-batch ", i));
          }
          set_of[i] = free_sets.back();
          free_sets.pop_back();
          const int64_t per = engine::NumElements(model_->input_shape());
          engine::Shape shape = model_->input_shape();
          shape.insert(shape.begin(), sizes[i]);
          x_in[i] = x->View(begin[i] * per, shape);
        }
        c.activation_set = set_of[i];
        in_flight++;
        result.peak_in_flight = std::max(result.peak_in_flight, in_flight);
        ASSIGN_OR_RETURN(out[i], model_->Forward(x_in[i], c));
        result.peak_activation_bytes =
            std::max(result.peak_activation_bytes, model_->held_activation_bytes());
        if (last) {
          ASSIGN_OR_RETURN(dlogits[i], Sized(&dlogits_store_[set_of[i]], sizes[i],
                                             model_->output_shape(), "the loss gradient"));
          const engine::Tensor y = labels->View(begin[i], {sizes[i]});
          ASSIGN_OR_RETURN(const engine::LossResult r,
                           loss_->Compute(out[i], y, scale, &dlogits[i]));
          result.loss_sum += r.loss_sum;
          result.correct += r.correct;
        }
        break;
      }
      case Op::kSendActivation:
        RETURN_IF_ERROR(transport.Send(s + 1, MessageKind::kActivation, i, out[i]));
        break;
      case Op::kRecvGradient: {
        ASSIGN_OR_RETURN(dout[i], Sized(&dout_store_[set_of[i]], sizes[i], model_->output_shape(),
                                        "a received gradient"));
        RETURN_IF_ERROR(transport.Recv(s + 1, MessageKind::kGradient, i, &dout[i]));
        break;
      }
      case Op::kBackward:
        // The accumulation's order is micro-batch order (schedule.h).
        if (i != next_backward++) {
          return absl::InternalError(absl::StrCat("pipeline: stage ", s, " ran backward ", i,
                                                  " out of micro-batch order"));
        }
        c.activation_set = set_of[i];
        RETURN_IF_ERROR(model_->Backward(last ? dlogits[i] : dout[i], c));
        RETURN_IF_ERROR(Accumulate(i, m));
        free_sets.push_back(set_of[i]);
        in_flight--;
        break;
      case Op::kSendGradient:
        RETURN_IF_ERROR(transport.Send(s - 1, MessageKind::kGradient, i, model_->input_grad()));
        break;
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (a.op == Op::kForward || a.op == Op::kBackward) result.busy_seconds += dt;
    if (a.op == Op::kRecvActivation || a.op == Op::kRecvGradient) result.wait_seconds += dt;
  }
  return result;
}

}  // namespace yoke::pipeline
