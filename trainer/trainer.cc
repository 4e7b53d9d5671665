// Trainer setup: Create (spec, datasets, replicas, schedule, resume) and,
// on each replica's thread, Connect (rendezvous, broadcast, reducer).
#include "trainer/trainer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/coordinator_store.h"
#include "collective/gloo_communicator.h"
#include "collective/reducer.h"
#include "collective/shm_communicator.h"
#include "common/status.h"
#include "common/usable_cores.h"
#include "data/open_dataset.h"
#include "data/validation_split.h"
#include "engine/device_backend.h"
#include "engine/kernels/cpu/dnnl_context.h"
#include "jobspec/job_validate.h"
#include "jobspec/ps_check.h"
#include "spdlog/spdlog.h"
#include "trainer/trainer_internal.h"

namespace yoke::worker {
namespace {

// Creates `dir` and its parents (like mkdir -p).
absl::Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create directory ", dir, ": ", ec.message()));
  }
  return absl::OkStatus();
}

// Synchronized batch norm's sums, over the replica's own communicator. They
// queue behind the gradient buckets already in flight, which keeps one order
// of ops on every rank: each rank's layers call this at the same points of
// the same forward and backward.
class CommunicatorSum final : public engine::CrossReplicaSum {
 public:
  CommunicatorSum(collective::Communicator* comm, absl::Duration timeout)
      : comm_(comm), timeout_(timeout) {}
  absl::Status SumInPlace(float* data, int64_t count, const std::string& what) override {
    collective::AllreduceOptions o;
    o.timeout = timeout_;
    o.tag = what;
    return comm_
        ->Allreduce(collective::Buffer{data, count, collective::DataType::kF32,
                                       collective::DeviceKind::kCpu, 0},
                    o)
        ->Wait();
  }

 private:
  collective::Communicator* const comm_;
  const absl::Duration timeout_;
};

}  // namespace

using trainer_internal::FlatBuffer;

Trainer::~Trainer() = default;

engine::Model& Trainer::model(int i) {
  if (replicas_[i]->model == nullptr) {
    spdlog::critical("trainer: local replica {} is PS task {} and has no model", i,
                     replicas_[i]->ps_index);
    std::abort();
  }
  return *replicas_[i]->model;
}

namespace {

// The GPU a CUDA job trains on: this process's first (the worker sets
// CUDA_VISIBLE_DEVICES to the job's). One replica on one GPU for now (job
// validation says so at submit; checked here for the C++ API too). A
// machine without a usable GPU fails here with cudart's reason, which
// yoke-trainer reports with exit 2.
absl::StatusOr<engine::Device> CudaDevice(const v1::JobSpec& spec, const TrainerOptions& options) {
  // The same rules as job validation, which a caller may have skipped
  // (spec_validated): gradient accumulation sums on the host.
  if (spec.training().accumulation_steps() > 1) {
    return absl::UnimplementedError(
        "training.accumulation_steps: above 1 is not supported on distribution.device 'cuda' "
        "yet");
  }
  if (options.world_size > 1 || options.num_replicas > 1) {
    return absl::UnimplementedError(absl::StrCat(
        "distribution.device: 'cuda' trains on one GPU for now; this job has ", options.world_size,
        " replicas, and several GPU replicas need the NCCL gradient reducer (not built yet)"));
  }
  const engine::Device device = engine::Device::CUDA(0);
  ASSIGN_OR_RETURN(engine::DeviceBackend * backend, engine::BackendFor(device));
  absl::StatusOr<engine::Allocator*> usable = backend->allocator(device.index);
  if (!usable.ok()) {
    return common::Annotate(usable.status(), "distribution.device: 'cuda': no usable GPU");
  }
  RETURN_IF_ERROR(engine::SetDevicePrecision(device, spec.training().precision()));
  return device;
}

// Synchronized batch norm needs every rank in every step's sums, so no
// rank may be left without samples (the trainer skips forward and backward
// on an empty slice).
absl::Status CheckSyncBatchNormSteps(const v1::JobSpec& spec, int64_t examples, int world_size) {
  const v1::TrainingSpec& tr = spec.training();
  const int64_t last_batch = examples % tr.batch_size();
  if (!spec.distribution().sync_batch_norm() || world_size <= 1 ||
      (tr.batch_size() >= world_size && (last_batch == 0 || last_batch >= world_size))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "distribution.sync_batch_norm: every replica needs at least one example in every "
      "step, but ",
      tr.batch_size() < world_size ? absl::StrCat("training.batch_size is ", tr.batch_size())
                                   : absl::StrCat("the last step of each epoch has ", last_batch,
                                                  " of the ", examples, " training examples"),
      " for ", world_size,
      " replicas; change the batch size or data.train.num_examples, or use fewer "
      "replicas"));
}

}  // namespace

namespace {

// training.recompute, training.recompute_batch_norm and training.precision:
// bf16, on one replica's model; `log` says what they changed.
absl::Status ConfigureModel(engine::Model& model, const v1::TrainingSpec& tr, bool log) {
  if (tr.recompute()) {
    ASSIGN_OR_RETURN(const int segments, model.SetRecompute(true));
    if (log) {
      spdlog::info("training.recompute: {} blocks' activations are computed again in backward",
                   segments);
    }
  }
  if (tr.recompute_batch_norm()) {
    ASSIGN_OR_RETURN(const int outputs, model.SetRecomputeBatchNorm(true));
    if (log) {
      spdlog::info(
          "training.recompute_batch_norm: {} batch norm outputs are applied again in backward",
          outputs);
    }
  }
  if (tr.precision() == "bf16") {
    ASSIGN_OR_RETURN(const int layers, model.UseBf16(true));
    if (log)
      spdlog::info("training.precision bf16: {} layers compute in bf16 with fp32 sums", layers);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const v1::JobSpec& spec,
                                                         const TrainerOptions& options) {
  if (!options.spec_validated) RETURN_IF_ERROR(common::ValidateJobSpec(spec));
  if (options.world_size < 1 || options.num_replicas < 1 || options.first_rank < 0 ||
      options.first_rank + options.num_replicas > options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trainer: ranks [", options.first_rank, ", ", options.first_rank + options.num_replicas,
        ") (first rank, local replicas) must lie in [0, world size ", options.world_size, ")"));
  }
  if (options.world_size > 1 && options.store == nullptr && options.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "trainer: a world size above 1 needs a rendezvous (a store, or the coordinator's "
        "address with the job id and attempt)");
  }
  std::unique_ptr<Trainer> t(new Trainer());
  t->spec_ = spec;
  t->options_ = options;
  const v1::TrainingSpec& tr = spec.training();
  if (spec.distribution().device() == "cuda") {
    ASSIGN_OR_RETURN(t->device_, CudaDevice(spec, options));
  }
  // The process's thread budget is split evenly over its replicas (see the
  // header); this thread runs local replica 0.
  // training.threads is capped at this machine's cores: more would only
  // oversubscribe them (and a huge count exhausted libgomp's memory).
  const int cores = common::UsableCores();
  const int budget = tr.threads() > 0 ? std::min(tr.threads(), cores) : cores;
  if (tr.threads() > cores) {
    spdlog::warn("training.threads {} capped at this machine's {} cores", tr.threads(), cores);
  }
  t->threads_ = engine::cpu::SetCpuThreads(std::max(1, budget / options.num_replicas));
  const int timeout_s = spec.distribution().collective_timeout_s() > 0
                            ? spec.distribution().collective_timeout_s()
                            : 300;
  t->collective_timeout_ = options.collective_timeout > absl::ZeroDuration()
                               ? options.collective_timeout
                               : absl::Seconds(timeout_s);

  ASSIGN_OR_RETURN(auto train, data::OpenDataset(spec.data().train(), "data.train"));
  t->train_ = std::move(train);
  if (spec.data().has_test()) {
    ASSIGN_OR_RETURN(auto test, data::OpenDataset(spec.data().test(), "data.test"));
    if (test->example_shape() != t->train_->example_shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.test: examples of shape ", data::ShapeToString(test->example_shape()),
          " do not match data.train's ", data::ShapeToString(t->train_->example_shape())));
    }
    t->test_ = std::move(test);
  }
  // The held-out part is chosen before anything else looks at data.train's
  // size: steps per epoch and the sampler see only the part trained on.
  if (spec.data().validation_split() > 0) {
    ASSIGN_OR_RETURN(
        data::SplitIndices split,
        data::SplitForValidation(t->train_->size(), spec.data().validation_split(), tr.seed()));
    std::shared_ptr<const data::Dataset> all = t->train_;
    t->validation_ = data::Subset(all, std::move(split.validation));
    t->train_ = data::Subset(all, std::move(split.train));
  }
  int classes = t->train_->num_classes();
  if (t->test_) classes = std::max(classes, t->test_->num_classes());

  engine::Shape input(t->train_->example_shape().begin(), t->train_->example_shape().end());
  t->model_input_ = input;
  t->model_classes_ = classes;
  if (spec.distribution().pipeline().stages() > 1) {
    t->stages_ = spec.distribution().pipeline().stages();
    RETURN_IF_ERROR(t->PlanPipeline(input, classes));
  }
  t->ps_tasks_ = common::ParameterServerTasks(spec);
  if (t->ps_job()) RETURN_IF_ERROR(t->AssignPsRoles());
  for (int i = 0; i < options.num_replicas; ++i) {
    auto r = std::make_unique<Replica>();
    r->local = i;
    r->rank = options.first_rank + i;
    r->device = t->device_;
    if (t->ps_job()) t->SetPsRole(*r);
    if (r->ps_task) {
      // A PS task keeps its shard alone, never a whole model (local
      // replica 0, a replica, was built first).
      RETURN_IF_ERROR(t->PreparePsTask(*r));
      t->replicas_.push_back(std::move(r));
      continue;
    }
    if (t->pipelined()) {
      RETURN_IF_ERROR(t->CreateStage(*r, input, classes));
    } else {
      ASSIGN_OR_RETURN(r->model, engine::Model::Create(spec.model(), input, classes, r->device));
    }
    RETURN_IF_ERROR(ConfigureModel(*r->model, tr, i == 0));
    ASSIGN_OR_RETURN(r->loss,
                     engine::CreateLoss(tr.loss().empty() ? "softmax_cross_entropy" : tr.loss(),
                                        tr.label_smoothing(), r->device));
    ASSIGN_OR_RETURN(r->optimizer, engine::CreateOptimizer(tr.optimizer(), &r->model->params()));
    r->model->params().Initialize(tr.seed());
    t->replicas_.push_back(std::move(r));
  }

  RETURN_IF_ERROR(CheckSyncBatchNormSteps(spec, t->train_->size(), options.world_size));
  t->steps_per_epoch_ = (t->train_->size() + tr.batch_size() - 1) / tr.batch_size();
  t->total_steps_ = t->steps_per_epoch_ * tr.epochs();
  if (tr.max_steps() > 0) t->total_steps_ = std::min(t->total_steps_, tr.max_steps());
  ASSIGN_OR_RETURN(t->schedule_,
                   engine::CreateSchedule(tr.schedule(), tr.optimizer().lr(), t->total_steps_));

  if (!options.resume.empty()) RETURN_IF_ERROR(t->Restore(options.resume));
  // A restart keeps reporting the best checkpoint an earlier attempt wrote.
  if (spec.checkpoint().keep_best() && t->EarlyStopping().best_epoch > 0) {
    const std::string best = spec.checkpoint().dir() + "/best.ckpt";
    if (std::filesystem::exists(best)) t->best_checkpoint_ = best;
  }
  if (!spec.checkpoint().dir().empty() && options.first_rank == 0) {
    RETURN_IF_ERROR(MakeDirs(spec.checkpoint().dir()));
  }
  return t;
}

collective::GlooOptions Trainer::GlooFor() const {
  collective::GlooOptions go;
  go.hostname = options_.hostname;
  go.rank_hosts = options_.rank_hosts;
  go.connect_timeout = collective_timeout_;
  return go;
}

void Trainer::Adopt(std::unique_ptr<collective::Communicator>* slot,
                    std::unique_ptr<collective::Communicator> comm) {
  absl::MutexLock l(&comm_mu_);
  *slot = std::move(comm);
  if (aborted_) (*slot)->Abort("another replica of this trainer failed");
}

absl::Status Trainer::Connect(Replica& r) {
  const collective::GlooOptions go = GlooFor();
  // Ranks that share a host (by rank_hosts) reduce gradients through shared
  // memory, and only one of them per host talks to the other hosts
  // (shm_communicator.h; YOKE_SHM=0 in the worker's environment turns it off).
  ASSIGN_OR_RETURN(auto comm, collective::CreateCommunicator(group_store_.get(), r.rank,
                                                             options_.world_size, go));
  collective::Communicator* c = comm.get();
  Adopt(&r.comm, std::move(comm));
  RETURN_IF_ERROR(BroadcastInitialState(r, c));
  RETURN_IF_ERROR(CheckResumePosition(r));
  RETURN_IF_ERROR(CreateReducer(r, c));
  if (spec_.distribution().sync_batch_norm()) {
    r.sync_stats = std::make_unique<CommunicatorSum>(c, collective_timeout_);
  }
  return absl::OkStatus();
}

absl::Status Trainer::BroadcastInitialState(Replica& r, collective::Communicator* c) {
  // Every rank starts from rank 0's parameters, state buffers and optimizer
  // state (identical already when every rank used the same seed or
  // checkpoint; the broadcast makes it a guarantee, once, before step 1).
  engine::ParamSet& ps = r.model->params();
  std::vector<std::pair<std::string, engine::Tensor>> tensors = {
      {"parameters", ps.flat_values()}, {"state buffers", ps.flat_state()}};
  for (auto& named : r.optimizer->State())
    tensors.emplace_back("optimizer " + named.first, named.second);
  std::vector<std::unique_ptr<collective::Work>> works;
  for (auto& [name, t] : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    collective::Options o;
    o.timeout = collective_timeout_;
    o.tag = "initial " + name;
    works.push_back(c->Broadcast(FlatBuffer(t), /*root=*/0, o));
  }
  for (auto& w : works) RETURN_IF_ERROR(w->Wait());
  return absl::OkStatus();
}

absl::Status Trainer::CheckResumePosition(Replica& r) {
  // Every rank continues from where rank 0 does. They differ when the
  // checkpoint directory is not one storage that every worker sees: a rank
  // that found no checkpoint would start at step 0 beside ranks at step
  // 1200, and the job would run on with mismatched steps.
  int64_t mine[3] = {step_, epoch_, step_in_epoch_};
  int64_t root[3] = {step_, epoch_, step_in_epoch_};
  collective::Buffer pos;
  pos.data = root;
  pos.count = 3;
  pos.dtype = collective::DataType::kI64;
  collective::Options po;
  po.timeout = collective_timeout_;
  po.tag = "resume position";
  RETURN_IF_ERROR(r.comm->Broadcast(pos, /*root=*/0, po)->Wait());
  if (std::equal(mine, mine + 3, root) == false) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", r.rank, " would continue from step ", mine[0],
        resumed_from_.empty() ? " (it found no checkpoint)"
                              : absl::StrCat(" (checkpoint ", resumed_from_, ")"),
        " but rank 0 from step ", root[0],
        ": checkpoint.dir must be storage that every worker sees, with the same path"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::CreateReducer(Replica& r, collective::Communicator* c) {
  engine::ParamSet& ps = r.model->params();
  std::vector<collective::ParamRange> ranges;
  for (const auto& e : ps.entries()) ranges.push_back({e.offset, engine::NumElements(e.shape)});
  const v1::DistributionSpec& d = spec_.distribution();
  collective::ReducerOptions ro;
  if (d.first_bucket_mb() > 0)
    ro.first_bucket_bytes = static_cast<int64_t>(d.first_bucket_mb() * (1 << 20));
  if (d.bucket_cap_mb() > 0) ro.bucket_bytes = static_cast<int64_t>(d.bucket_cap_mb() * (1 << 20));
  ro.first_bucket_bytes = std::max<int64_t>(ro.first_bucket_bytes, 1);
  ro.bucket_bytes = std::max<int64_t>(ro.bucket_bytes, 1);
  if (d.gradient_compression() == "fp16") ro.wire = collective::DataType::kF16;
  if (d.gradient_compression() == "bf16") ro.wire = collective::DataType::kBF16;
  ro.timeout = collective_timeout_;
  ASSIGN_OR_RETURN(r.reducer, collective::Reducer::Create(c, FlatBuffer(ps.flat_grads()),
                                                          std::move(ranges), ro));
  return absl::OkStatus();
}

void Trainer::AbortOthers(const Replica* failed, const absl::Status& why) {
  absl::MutexLock l(&comm_mu_);
  aborted_ = true;
  for (auto& r : replicas_) {
    if (r.get() == failed) continue;
    const std::string msg = absl::StrCat("local replica ", failed->local, " (rank ", failed->rank,
                                         ") failed: ", why.message());
    if (r->comm) r->comm->Abort(msg);
    if (r->stage_comm) r->stage_comm->Abort(msg);
    if (r->shm_transport) r->shm_transport->Abort(absl::AbortedError(msg));
    if (r->ps_client) r->ps_client->Abort();
    if (r->ps_server) r->ps_server->Abort();
  }
}

}  // namespace yoke::worker
