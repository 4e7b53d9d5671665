// yoke::DistributedContext (include/yoke/distributed.h): a rendezvous
// store, the Gloo communicator and, per attached model, the trainer's
// Reducer (collective/reducer.h).
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/internal.h"
#include "collective/coordinator_store.h"
#include "collective/file_store.h"
#include "collective/gloo_communicator.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace yoke {
namespace {

collective::Buffer Flat(const engine::Tensor& t) {
  return collective::Buffer{t.raw(), t.numel(), collective::DataType::kF32,
                            collective::DeviceKind::kCpu, 0};
}

// Every rank announces itself under "api/join/<rank>" and waits for the others,
// so a missing rank is named (Gloo's own bootstrap would only name a key).
absl::Status Join(collective::Store* store, const DistributedOptions& o, absl::Duration timeout) {
  RETURN_IF_ERROR(
      store->Set(absl::StrCat("api/join/", o.rank), absl::StrCat(o.hostname, " pid ", ::getpid())));
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<int> missing;
  for (int peer = 0; peer < o.world_size; ++peer) {
    if (peer == o.rank) continue;
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    auto v = store->Get(absl::StrCat("api/join/", peer), left);
    if (v.ok()) continue;
    if (v.status().code() != absl::StatusCode::kDeadlineExceeded) return v.status();
    missing.push_back(peer);
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("rendezvous ", o.rendezvous, ": rank ", o.rank, " of ", o.world_size, " waited ",
                   absl::FormatDuration(timeout), " for rank", missing.size() > 1 ? "s " : " ",
                   absl::StrJoin(missing, ", "),
                   ", which never joined (not started, crashed, or given another rendezvous)"));
}

absl::StatusOr<std::unique_ptr<collective::Store>> OpenStore(const DistributedOptions& o) {
  const std::string& rendezvous = o.rendezvous;
  if (absl::StartsWith(rendezvous, "file:")) {
    const std::string dir = rendezvous.substr(5);
    if (dir.empty()) {
      return absl::InvalidArgumentError("rendezvous 'file:' needs a directory: file:DIR");
    }
    ASSIGN_OR_RETURN(auto store, collective::FileStore::Open(dir));
    return std::unique_ptr<collective::Store>(std::move(store));
  }
  if (absl::StartsWith(rendezvous, "coordinator:")) {
    const std::string target = rendezvous.substr(12);
    if (target.empty() || o.job_id.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rendezvous '", rendezvous, "' needs the coordinator's HOST:PORT and a job id ",
          "(coordinator:HOST:PORT with YOKE_JOB_ID and YOKE_ATTEMPT)"));
    }
    // TLS and the attempt's secret, as the worker daemon hands them to trainers.
    ASSIGN_OR_RETURN(collective::CoordinatorStoreOptions so,
                     collective::CoordinatorStoreOptions::FromEnvironment());
    return std::unique_ptr<collective::Store>(
        std::make_unique<collective::CoordinatorStore>(target, o.job_id, o.attempt, so));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("rendezvous '", rendezvous,
                   "': expected file:DIR (a directory every rank sees) or coordinator:HOST:PORT"));
}

}  // namespace

DistributedContext::Impl::~Impl() {
  if (comm != nullptr) {
    if (absl::Status s = comm->Leave(timeout); !s.ok()) {
      spdlog::warn("rank {}: leaving the group: {}", options.rank, s.ToString());
    }
  }
}

DistributedContext::DistributedContext(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
DistributedContext::DistributedContext(DistributedContext&&) noexcept = default;
DistributedContext& DistributedContext::operator=(DistributedContext&&) noexcept = default;
DistributedContext::~DistributedContext() = default;

int DistributedContext::rank() const { return impl_->options.rank; }
int DistributedContext::world_size() const { return impl_->options.world_size; }

absl::StatusOr<DistributedContext> DistributedContext::Create(const DistributedOptions& o) {
  if (o.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world size must be >= 1, got ", o.world_size));
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " must lie in [0, world size ", o.world_size, ")"));
  }
  if (!(o.timeout_seconds > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_seconds must be > 0, got ", o.timeout_seconds));
  }
  if (!(o.first_bucket_mb > 0) || !(o.bucket_cap_mb > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("bucket sizes must be > 0, got ",
                                                   o.first_bucket_mb, " and ", o.bucket_cap_mb));
  }
  auto impl = std::make_shared<Impl>();
  impl->options = o;
  impl->timeout = absl::Seconds(o.timeout_seconds);
  if (o.world_size == 1) return DistributedContext(std::move(impl));
  if (o.rendezvous.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world size ", o.world_size, " needs a rendezvous (YOKE_RENDEZVOUS=file:DIR)"));
  }
  ASSIGN_OR_RETURN(impl->store, OpenStore(o));
  RETURN_IF_ERROR(Join(impl->store.get(), o, impl->timeout));
  // The same key namespace as the trainer's group (trainer_step.cc).
  impl->group_store =
      std::make_unique<collective::PrefixStore>(impl->store.get(), "data-parallel/");
  collective::GlooOptions go;
  go.hostname = o.hostname;
  go.connect_timeout = impl->timeout;
  ASSIGN_OR_RETURN(impl->comm, collective::CreateGlooCommunicator(impl->group_store.get(), o.rank,
                                                                  o.world_size, go));
  return DistributedContext(std::move(impl));
}

absl::StatusOr<DistributedOptions> DistributedContext::OptionsFromEnvironment() {
  DistributedOptions o;
  auto get = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  auto parse_int = [](const char* name, const char* v, int* out) -> absl::Status {
    if (!absl::SimpleAtoi(v, out)) {
      return absl::InvalidArgumentError(absl::StrCat(name, "='", v, "': expected an integer"));
    }
    return absl::OkStatus();
  };
  if (const char* v = get("YOKE_RANK")) RETURN_IF_ERROR(parse_int("YOKE_RANK", v, &o.rank));
  if (const char* v = get("YOKE_WORLD_SIZE")) {
    RETURN_IF_ERROR(parse_int("YOKE_WORLD_SIZE", v, &o.world_size));
  }
  if (const char* v = get("YOKE_RENDEZVOUS")) o.rendezvous = v;
  if (const char* v = get("YOKE_HOSTNAME")) o.hostname = v;
  if (const char* v = get("YOKE_JOB_ID")) o.job_id = v;
  if (const char* v = get("YOKE_ATTEMPT"))
    RETURN_IF_ERROR(parse_int("YOKE_ATTEMPT", v, &o.attempt));
  if (const char* v = get("YOKE_TIMEOUT_S")) {
    if (!absl::SimpleAtod(v, &o.timeout_seconds) || !(o.timeout_seconds > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("YOKE_TIMEOUT_S='", v, "': expected a number of seconds > 0"));
    }
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("YOKE_RANK=", o.rank, " must lie in [0, ",
                                                   "YOKE_WORLD_SIZE=", o.world_size, ")"));
  }
  return o;
}

absl::StatusOr<DistributedContext> DistributedContext::FromEnvironment() {
  ASSIGN_OR_RETURN(DistributedOptions o, OptionsFromEnvironment());
  return Create(o);
}

absl::Status DistributedContext::BroadcastParameters(Model& model) {
  Model::Impl& m = *model.impl();
  if (impl_->comm == nullptr) return absl::OkStatus();  // world size 1
  if (m.reducer) {
    return absl::FailedPreconditionError(
        "BroadcastParameters: the model is already attached to a distributed context");
  }
  collective::Communicator* c = impl_->comm.get();
  engine::ParamSet& ps = m.model->params();
  collective::Options opt;
  opt.timeout = impl_->timeout;
  // Every rank must have the same layout; each compares with rank 0's and
  // the verdict is summed, so all ranks fail together instead of the others
  // waiting for a broadcast that never matches.
  const int64_t mine[3] = {ps.flat_values().numel(), ps.flat_state().numel(),
                           static_cast<int64_t>(ps.entries().size())};
  int64_t root[3] = {mine[0], mine[1], mine[2]};
  opt.tag = "parameter layout";
  RETURN_IF_ERROR(c->Broadcast(collective::Buffer{root, 3, collective::DataType::kI64,
                                                  collective::DeviceKind::kCpu, 0},
                               0, opt)
                      ->Wait());
  int64_t mismatches = std::equal(mine, mine + 3, root) ? 0 : 1;
  collective::AllreduceOptions ao;
  ao.timeout = impl_->timeout;
  ao.tag = "parameter layout check";
  RETURN_IF_ERROR(c->Allreduce(collective::Buffer{&mismatches, 1, collective::DataType::kI64,
                                                  collective::DeviceKind::kCpu, 0},
                               ao)
                      ->Wait());
  if (mismatches > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "BroadcastParameters: ", mismatches,
        " rank(s) have a model whose parameter layout "
        "differs from rank 0's (this rank: ",
        mine[0], " values, ", mine[1], " state, ", mine[2], " tensors; rank 0: ", root[0], ", ",
        root[1], ", ", root[2], "); every rank must build the same model"));
  }
  std::vector<std::unique_ptr<collective::Work>> works;
  for (const engine::Tensor* t : {&ps.flat_values(), &ps.flat_state()}) {
    if (!t->defined() || t->numel() == 0) continue;
    opt.tag = t == &ps.flat_values() ? "initial parameters" : "initial state buffers";
    works.push_back(c->Broadcast(Flat(*t), /*root=*/0, opt));
  }
  for (auto& w : works) RETURN_IF_ERROR(w->Wait());

  std::vector<collective::ParamRange> ranges;
  for (const auto& e : ps.entries()) ranges.push_back({e.offset, engine::NumElements(e.shape)});
  collective::ReducerOptions ro;
  ro.first_bucket_bytes = std::max<int64_t>(1, impl_->options.first_bucket_mb * (1 << 20));
  ro.bucket_bytes = std::max<int64_t>(1, impl_->options.bucket_cap_mb * (1 << 20));
  ro.timeout = impl_->timeout;
  ASSIGN_OR_RETURN(m.reducer,
                   collective::Reducer::Create(c, Flat(ps.flat_grads()), std::move(ranges), ro));
  m.ctx = impl_;
  return absl::OkStatus();
}

absl::Status DistributedContext::AllreduceGradients(Model& model) {
  Model::Impl& m = *model.impl();
  if (impl_->comm == nullptr) return absl::OkStatus();  // world size 1
  if (m.ctx != impl_ || !m.reducer) {
    return absl::FailedPreconditionError(
        "AllreduceGradients: the model is not attached to this context; call "
        "BroadcastParameters(model) once before training, so every rank starts from rank 0's "
        "parameters");
  }
  if (!m.step_prepared) {
    // No Backward on this rank this step (an empty slice): contribute zero
    // gradients over zero samples.
    m.model->params().flat_grads().SetZero();
    RETURN_IF_ERROR(m.reducer->Prepare(0));
    m.step_prepared = true;
  }
  absl::StatusOr<collective::StepTotals> totals = m.reducer->Finish();
  m.step_prepared = false;
  if (!totals.ok()) return totals.status();
  m.grad_count = totals->samples;
  return absl::OkStatus();
}

absl::Status DistributedContext::Barrier() {
  if (impl_->comm == nullptr) return absl::OkStatus();
  collective::Options o;
  o.timeout = impl_->timeout;
  o.tag = "barrier";
  return impl_->comm->Barrier(o)->Wait();
}

}  // namespace yoke
