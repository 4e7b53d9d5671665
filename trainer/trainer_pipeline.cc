// Trainer: pipeline jobs (distribution.pipeline; docs/pipeline.md).
//
// Rank r runs stage r % p of data-parallel pipeline r / p. Every stage of a
// pipeline reads the same slice of each batch (the first uses its inputs,
// the last its labels) and runs the verified schedule's micro-batches
// through its StageRunner, its activations and their gradients travelling
// through shared-memory rings between stages on one host and over Gloo
// pairs between hosts. With several pipelines the
// stage's gradient is then reduced over the same stage of every pipeline.
// Each step's loss, correct count, sample count and stop votes are summed
// over every rank, so all ranks report the job's numbers and stop after the
// same step. Evaluation forwards the test and validation splits through
// pipeline 0's stages; its last stage's sums reach every rank.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/gloo_communicator.h"
#include "common/status.h"
#include "data/pipeline.h"
#include "jobspec/pipeline_check.h"
#include "pipeline/runtime/gloo_transport.h"
#include "pipeline/runtime/shm_transport.h"
#include "pipeline/runtime/stage_plan.h"
#include "spdlog/spdlog.h"
#include "trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace yoke::worker {

using trainer_internal::BatchInput;
using trainer_internal::BatchLabels;
using trainer_internal::Clock;
using trainer_internal::Seconds;

namespace {

// The entries of `hosts` (rank_hosts, by global rank) for `ranks`; empty
// when `hosts` does not name them all.
std::vector<std::string> HostsOf(const std::vector<std::string>& hosts,
                                 const std::vector<int>& ranks) {
  std::vector<std::string> out;
  for (int r : ranks) {
    if (r >= static_cast<int>(hosts.size())) return {};
    out.push_back(hosts[r]);
  }
  return out;
}

// Where evaluation's message slots start (training uses the micro-batch
// indices, below kMaxPipelineMicroBatches).
constexpr int kEvalSlotBase = 1 << 20;

}  // namespace

absl::Status Trainer::PlanPipeline(const engine::Shape& input, int classes) {
  const v1::JobSpec& spec = spec_;
  const v1::PipelineSpec& pp = spec.distribution().pipeline();
  // What validation refuses, for callers that skipped it (spec_validated).
  if (options_.world_size % stages_ != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("distribution.pipeline.stages: the job's ", options_.world_size,
                     " ranks are not a multiple of its ", stages_, " stages"));
  }
  if (!device_.is_cpu()) {
    return absl::UnimplementedError("distribution.pipeline: runs on the CPU only for now");
  }
  if (spec.training().accumulation_steps() > 1 || spec.distribution().sync_batch_norm()) {
    return absl::InvalidArgumentError(
        "distribution.pipeline: not with training.accumulation_steps or "
        "distribution.sync_batch_norm");
  }
  ASSIGN_OR_RETURN(const engine::Model::Cuts cuts,
                   engine::Model::PipelineCuts(spec.model(), input, classes));
  const std::vector<std::string> names(pp.boundaries().begin(), pp.boundaries().end());
  ASSIGN_OR_RETURN(const pipeline::StagePlan plan,
                   pipeline::PlanStages(cuts, stages_, names,
                                        names.empty() ? "distribution.pipeline.stages"
                                                      : "distribution.pipeline.boundaries"));
  stage_starts_ = plan.starts;
  model_layers_ = plan.layers;
  model_parameters_ = cuts.parameters;
  model_macs_ = 0;
  for (int64_t m : cuts.macs) model_macs_ += m;
  return absl::OkStatus();
}

absl::Status Trainer::CreateStage(Replica& r, const engine::Shape& input, int classes) {
  r.stage = r.rank % stages_;
  r.pipeline = r.rank / stages_;
  const int begin = stage_starts_[r.stage];
  const int end = r.stage + 1 < stages_ ? stage_starts_[r.stage + 1] : model_layers_;
  ASSIGN_OR_RETURN(r.model,
                   engine::Model::CreateStage(spec_.model(), input, classes, begin, end, r.device));
  return absl::OkStatus();
}

absl::Status Trainer::ConnectPipeline(Replica& r) {
  const int p = stages_;
  const int d = data_parallel_ranks();
  const collective::GlooOptions go = GlooFor();
  // Every rank: the step's scalars and the epoch's decisions.
  ASSIGN_OR_RETURN(auto comm, collective::CreateCommunicator(group_store_.get(), r.rank,
                                                             options_.world_size, go));
  Adopt(&r.comm, std::move(comm));
  RETURN_IF_ERROR(CheckResumePosition(r));
  // Where this stage's part of a whole-model checkpoint lies; resuming, it
  // is read now.
  RETURN_IF_ERROR(ShareStageSizes(r));
  if (!pipeline_resume_.empty()) RETURN_IF_ERROR(LoadStageSlices(r));

  // The pipeline's stages, point to point.
  std::vector<int> pipe_ranks;
  for (int s = 0; s < p; ++s) pipe_ranks.push_back(r.pipeline * p + s);
  collective::GlooOptions pgo = go;
  pgo.rank_hosts = HostsOf(options_.rank_hosts, pipe_ranks);
  r.pipe_store = std::make_unique<collective::PrefixStore>(
      group_store_.get(), absl::StrCat("pipeline-", r.pipeline, "/"));
  pipeline::StageOptions so;
  so.stage = r.stage;
  so.stages = p;
  so.schedule = spec_.distribution().pipeline().schedule() == "gpipe"
                    ? pipeline::ScheduleKind::kGPipe
                    : pipeline::ScheduleKind::k1F1B;
  so.micro_batches = common::PipelineMicroBatches(spec_.distribution().pipeline());
  // Several pipelines sum their losses (the reducer's count divides);
  // one takes its batch's mean, as one rank accumulating would.
  so.sum_loss = d > 1;
  ASSIGN_OR_RETURN(r.runner, pipeline::StageRunner::Create(
                                 r.model.get(), r.stage == p - 1 ? r.loss.get() : nullptr, so));
  RETURN_IF_ERROR(ConnectStages(r, pgo));
  if (d == 1) return absl::OkStatus();

  // The same stage of every pipeline: its parameters' data parallelism.
  std::vector<int> stage_ranks;
  for (int j = 0; j < d; ++j) stage_ranks.push_back(j * p + r.stage);
  collective::GlooOptions sgo = go;
  sgo.rank_hosts = HostsOf(options_.rank_hosts, stage_ranks);
  r.stage_store = std::make_unique<collective::PrefixStore>(group_store_.get(),
                                                            absl::StrCat("stage-", r.stage, "/"));
  ASSIGN_OR_RETURN(auto sc,
                   collective::CreateCommunicator(r.stage_store.get(), r.pipeline, d, sgo));
  collective::Communicator* c = sc.get();
  Adopt(&r.stage_comm, std::move(sc));
  RETURN_IF_ERROR(BroadcastInitialState(r, c));
  return CreateReducer(r, c);
}

bool Trainer::pipeline_through_shm() const {
  if (replicas_.empty() || replicas_[0]->shm_transport == nullptr) return false;
  const Replica& r = *replicas_[0];
  return r.shm_transport->shared(r.stage - 1) || r.shm_transport->shared(r.stage + 1);
}

absl::Status Trainer::ConnectStages(Replica& r, const collective::GlooOptions& pgo) {
  const int p = stages_;
  // Stages that share a host talk through shared-memory rings; Gloo's pairs
  // join the pipeline's stages unless every link is shared.
  const std::vector<bool> links = pipeline::SharedLinks(pgo.rank_hosts);
  const bool all_shared = std::all_of(links.begin(), links.end(), [](bool b) { return b; });
  const bool any_shared = std::any_of(links.begin(), links.end(), [](bool b) { return b; });
  std::unique_ptr<pipeline::Transport> gloo;
  if (!all_shared || !any_shared) {
    ASSIGN_OR_RETURN(gloo, pipeline::GlooTransport::Create(r.pipe_store.get(), r.stage, p, pgo,
                                                           collective_timeout_));
  }
  if (!any_shared) {
    r.transport = std::move(gloo);
    spdlog::info("rank {}: pipeline: stage {} of {} talks to its neighbours over gloo", r.rank,
                 r.stage + 1, p);
    return absl::OkStatus();
  }
  std::vector<bool> colocated(p, false);
  colocated[r.stage] = true;
  if (r.stage > 0) colocated[r.stage - 1] = links[r.stage - 1];
  if (r.stage + 1 < p) colocated[r.stage + 1] = links[r.stage];
  // Each ring of the link to the next stage holds what the schedule keeps in
  // flight there (at most this stage's forwards whose backwards have not
  // run, of its largest micro-batch), or two evaluation batches, so that a
  // send never waits for room.
  const int64_t out_elems = engine::NumElements(r.model->output_shape());
  const int d = data_parallel_ranks();
  const int64_t batch = (spec_.training().batch_size() + d - 1) / d;
  const int m = common::PipelineMicroBatches(spec_.distribution().pipeline());
  const int64_t micro = (batch + m - 1) / m;
  const int in_flight = r.runner->planned_in_flight();
  pipeline::ShmTransportOptions so;
  so.gradient_ring_bytes = pipeline::RingBytesFor(in_flight, micro * out_elems);
  so.activation_ring_bytes =
      std::max(so.gradient_ring_bytes, pipeline::RingBytesFor(2, EvalBatchSize() * out_elems));
  so.timeout = collective_timeout_;
  so.connect_timeout = pgo.connect_timeout;
  ASSIGN_OR_RETURN(auto shm, pipeline::ShmTransport::Create(r.pipe_store.get(), r.stage, p,
                                                            colocated, so, std::move(gloo)));
  {
    absl::MutexLock l(&comm_mu_);
    r.shm_transport = shm.get();
    if (aborted_) shm->Abort(absl::AbortedError("another replica of this trainer failed"));
  }
  for (const int n : {r.stage - 1, r.stage + 1}) {
    if (n < 0 || n >= p) continue;
    if (shm->shared(n)) {
      spdlog::info(
          "rank {}: pipeline: stage {} of {} talks to stage {} through shared memory "
          "(its ring there holds {} bytes)",
          r.rank, r.stage + 1, p, n + 1, shm->ring_bytes(n));
    } else {
      spdlog::info("rank {}: pipeline: stage {} of {} talks to stage {} over gloo", r.rank,
                   r.stage + 1, p, n + 1);
    }
  }
  r.transport = std::move(shm);
  return absl::OkStatus();
}

absl::StatusOr<Trainer::StepOutcome> Trainer::PipelineStep(LoopState& s, data::Batch& batch) {
  Replica& rep = s.rep;
  const int64_t n = batch.n;
  const bool first = rep.stage == 0, last = rep.stage == stages_ - 1;
  if (s.reducer) RETURN_IF_ERROR(s.reducer->Prepare(n));
  engine::LayerContext ctx;
  ctx.training = true;
  ctx.seed = spec_.training().seed();
  ctx.step = s.step;
  // Dropout masks are the data-parallel replica's: a pipeline draws those
  // of the one rank it stands for.
  ctx.replica = rep.pipeline;
  pipeline::StageRunner::StepResult res;
  if (n > 0) {
    const engine::Tensor x = first ? BatchInput(batch) : engine::Tensor(), y = BatchLabels(batch);
    ASSIGN_OR_RETURN(
        res, rep.runner->Step(first ? &x : nullptr, last ? &y : nullptr, n, *rep.transport, ctx));
    rep.peak_in_flight = std::max(rep.peak_in_flight, res.peak_in_flight);
    rep.peak_activation_bytes = std::max(rep.peak_activation_bytes, res.peak_activation_bytes);
  } else if (s.reducer) {
    rep.model->params().flat_grads().SetZero();
  }
  StepOutcome out;
  out.lr = schedule_->Lr(s.step);
  float grad_scale = 1.0f;  // one pipeline: the runner took the batch's mean
  if (s.reducer) {
    const auto finish_start = Clock::now();
    ASSIGN_OR_RETURN(collective::StepTotals totals, s.reducer->Finish());
    s.window.exposed += Seconds(Clock::now() - finish_start);
    s.window.comm += totals.comm_seconds;
    grad_scale = 1.0f / static_cast<float>(std::max<int64_t>(totals.samples, 1));
  }
  if (spec_.training().clip_grad_norm() > 0) {
    ASSIGN_OR_RETURN(const double norm, PipelineGradNorm(rep, grad_scale));
    s.window.grad_norm += norm;
    grad_scale *= engine::ClipFactor(norm, spec_.training().clip_grad_norm());
  }
  // The job's step: the last stages' loss and hits, their samples, and every
  // rank's stop vote.
  float loss = last ? static_cast<float>(res.loss_sum) : 0.0f;
  int64_t counts[3] = {last ? res.correct : 0, last ? n : 0, StopVote()};
  collective::AllreduceOptions o;
  o.timeout = collective_timeout_;
  o.tag = "step loss";
  auto w1 = rep.comm->Allreduce(
      collective::Buffer{&loss, 1, collective::DataType::kF32, collective::DeviceKind::kCpu, 0}, o);
  o.tag = "step counts";
  auto w2 = rep.comm->Allreduce(
      collective::Buffer{counts, 3, collective::DataType::kI64, collective::DeviceKind::kCpu, 0},
      o);
  RETURN_IF_ERROR(w1->Wait());
  RETURN_IF_ERROR(w2->Wait());
  out.global_n = counts[1];
  out.stop_voted = counts[2] > 0;
  s.epoch_sums.loss += loss;
  s.window.loss += loss;
  s.epoch_sums.correct += counts[0];
  s.window.correct += counts[0];
  RETURN_IF_ERROR(rep.optimizer->Step(out.lr, grad_scale));
  if (!std::isfinite(s.epoch_sums.loss)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "training diverged: the loss became %f at step %d (epoch %d); try a smaller "
        "training.optimizer.lr (now %g)",
        s.epoch_sums.loss, s.step, s.epoch + 1, spec_.training().optimizer().lr()));
  }
  return out;
}

absl::StatusOr<double> Trainer::PipelineGradNorm(Replica& r, float grad_scale) {
  // Each stage's sum of squares travels exactly: pipeline 0's stage s puts
  // the double's bits in slot s, every other slot and rank adds zero. Every
  // rank then adds the stages up in stage order, so all get the same norm.
  std::vector<int64_t> bits(stages_, 0);
  if (r.pipeline == 0) {
    const double local = engine::GradNorm(r.model->params(), 1.0f);
    const double squares = local * local;
    std::memcpy(&bits[r.stage], &squares, sizeof(double));
  }
  collective::AllreduceOptions o;
  o.timeout = collective_timeout_;
  o.tag = "gradient norm";
  RETURN_IF_ERROR(
      r.comm
          ->Allreduce(collective::Buffer{bits.data(), stages_, collective::DataType::kI64,
                                         collective::DeviceKind::kCpu, 0},
                      o)
          ->Wait());
  double sum = 0;
  for (int64_t b : bits) {
    double squares;
    std::memcpy(&squares, &b, sizeof(double));
    sum += squares;
  }
  return static_cast<double>(grad_scale) * std::sqrt(sum);
}

absl::Status Trainer::PipelineEvaluate(Replica& r) {
  ASSIGN_OR_RETURN(pipeline_eval_[0], PipelineEvaluateOn(r, test_, 0));
  if (validation_) {
    ASSIGN_OR_RETURN(pipeline_eval_[1], PipelineEvaluateOn(r, validation_, 1));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<double, double>> Trainer::PipelineEvaluateOn(
    Replica& r, const std::shared_ptr<data::Dataset>& set, int tag) {
  if (!set) return std::make_pair(0.0, 0.0);
  const bool first = r.stage == 0, last = r.stage == stages_ - 1;
  float loss_sum = 0;
  int64_t counts[2] = {0, 0};  // correct, n (pipeline 0's last stage)
  if (r.pipeline == 0) {
    ASSIGN_OR_RETURN(auto pipe, EvalPipeline(set, ReadsLabelsOnly(r, *set)));
    const engine::LayerContext ctx = EvalContext();
    engine::Model& model = *r.model;
    for (int b = 0;; ++b) {
      ASSIGN_OR_RETURN(auto batch, pipe->Next());
      if (!batch.has_value()) break;
      const int64_t n = batch->n;
      if (n == 0) continue;
      // Two slots in turn: a slot's next message waits for the last.
      const int slot = kEvalSlotBase + b % 2;
      engine::Tensor x;
      if (first) {
        x = BatchInput(*batch);
      } else {
        engine::Shape shape = model.input_shape();
        shape.insert(shape.begin(), n);
        ASSIGN_OR_RETURN(x, engine::Tensor::Allocate(shape, engine::DType::kF32, r.device,
                                                     "an evaluated activation"));
        RETURN_IF_ERROR(
            r.transport->Recv(r.stage - 1, pipeline::MessageKind::kActivation, slot, &x));
      }
      ASSIGN_OR_RETURN(engine::Tensor out, model.Forward(x, ctx));
      if (last) {
        ASSIGN_OR_RETURN(engine::LossResult lr,
                         r.loss->Compute(out, BatchLabels(*batch), 0.0f, nullptr));
        loss_sum += static_cast<float>(lr.loss_sum);
        counts[0] += lr.correct;
        counts[1] += n;
      } else {
        RETURN_IF_ERROR(
            r.transport->Send(r.stage + 1, pipeline::MessageKind::kActivation, slot, out));
      }
      pipe->Recycle(std::move(*batch));
    }
  }
  collective::AllreduceOptions o;
  o.timeout = collective_timeout_;
  o.tag = tag == 0 ? "test loss" : "validation loss";
  auto w1 = r.comm->Allreduce(
      collective::Buffer{&loss_sum, 1, collective::DataType::kF32, collective::DeviceKind::kCpu, 0},
      o);
  o.tag = tag == 0 ? "test counts" : "validation counts";
  auto w2 = r.comm->Allreduce(
      collective::Buffer{counts, 2, collective::DataType::kI64, collective::DeviceKind::kCpu, 0},
      o);
  RETURN_IF_ERROR(w1->Wait());
  RETURN_IF_ERROR(w2->Wait());
  const double n = static_cast<double>(std::max<int64_t>(counts[1], 1));
  return std::make_pair(loss_sum / n, static_cast<double>(counts[0]) / n);
}

}  // namespace yoke::worker
