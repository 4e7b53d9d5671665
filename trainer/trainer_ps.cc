// Parameter-server jobs in the Trainer (docs/parameter_servers.md): each
// local replica's role, the PS tasks' run, and a replica's push and pull.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collective/gloo_bootstrap.h"
#include "collective/shm_communicator.h"
#include "common/status.h"
#include "engine/checkpoint.h"
#include "jobspec/ps_check.h"
#include "ps/runtime/links.h"
#include "ps/shard_map.h"
#include "spdlog/spdlog.h"
#include "trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace yoke::worker {

using trainer_internal::Clock;
using trainer_internal::Seconds;

namespace {

ps::Consistency ConsistencyOf(const v1::DistributionSpec& d) {
  if (d.consistency() == "async") return ps::Consistency::kAsync;
  if (d.consistency() == "bounded") return ps::Consistency::kBounded;
  return ps::Consistency::kSync;
}

}  // namespace

absl::Status Trainer::AssignPsRoles() {
  const v1::DistributionSpec& d = spec_.distribution();
  ps_workers_ = std::max(d.workers(), 1);
  ps_per_worker_ = std::max(d.devices_per_worker(), 1);
  const int replicas = ps_workers_ * ps_per_worker_;
  if (options_.world_size != replicas + ps_tasks_) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer: a parameter-server job of ", ps_workers_, " x ", ps_per_worker_,
                     " replicas and ", ps_tasks_, " PS tasks has ", replicas + ps_tasks_,
                     " ranks, but the world size is ", options_.world_size));
  }
  dp_globals_.assign(replicas, 0);
  ps_globals_.assign(ps_tasks_, 0);
  for (int g = 0; g < options_.world_size; ++g) {
    const common::RankRole role = common::RoleOfRank(g, ps_workers_, ps_per_worker_, ps_tasks_);
    (role.ps ? ps_globals_ : dp_globals_)[role.index] = g;
  }
  if (common::RoleOfRank(options_.first_rank, ps_workers_, ps_per_worker_, ps_tasks_).ps) {
    return absl::InvalidArgumentError(
        "trainer: a process's first rank must be a replica, not a PS task (the coordinator "
        "places each worker's replicas before its PS tasks)");
  }
  return absl::OkStatus();
}

void Trainer::SetPsRole(Replica& r) const {
  const common::RankRole role = common::RoleOfRank(r.rank, ps_workers_, ps_per_worker_, ps_tasks_);
  r.ps_task = role.ps;
  r.ps_index = role.index;
  if (!role.ps) r.rank = role.index;  // the data-parallel rank
}

absl::Status Trainer::PreparePsTask(Replica& r) {
  if (replicas_.empty() || replicas_[0]->ps_task || replicas_[0]->model == nullptr) {
    return absl::InternalError("trainer: a PS task's values come from local replica 0's model");
  }
  const engine::Tensor& values = replicas_[0]->model->params().flat_values();
  ASSIGN_OR_RETURN(const ps::ShardMap map, ps::BuildShardMap(values.numel(), ps_tasks_));
  if (r.ps_index >= static_cast<int>(map.shards.size())) return absl::OkStatus();  // no shard
  r.ps_shard = map.shards[r.ps_index];
  ASSIGN_OR_RETURN(r.ps_values, engine::Tensor::Allocate(
                                    {r.ps_shard.count}, engine::DType::kF32, engine::Device::CPU(),
                                    absl::StrCat("PS task ", r.ps_index, "'s shard")));
  std::memcpy(r.ps_values.raw(), values.data<float>() + r.ps_shard.offset,
              static_cast<size_t>(r.ps_shard.count) * sizeof(float));
  return absl::OkStatus();
}

collective::GlooOptions Trainer::GlooForRanks(const std::vector<int>& globals) const {
  collective::GlooOptions go = GlooFor();
  go.rank_hosts.clear();
  if (options_.rank_hosts.empty()) return go;
  for (int g : globals) {
    go.rank_hosts.push_back(
        g < static_cast<int>(options_.rank_hosts.size()) ? options_.rank_hosts[g] : std::string());
  }
  return go;
}

collective::GlooOptions Trainer::LinkOptions(int replica, int ps) const {
  return GlooForRanks({dp_globals_[replica], ps_globals_[ps]});
}

bool Trainer::PsRestartable() const { return common::RestartsReplicasAlone(spec_); }

absl::Status Trainer::ConnectPs(Replica& r) {
  const int replicas = data_parallel_ranks();
  const bool restartable = PsRestartable();
  if (options_.ps_incarnation > 0 && !restartable) {
    return absl::FailedPreconditionError(
        "trainer: only an async or bounded parameter-server job takes a restarted replica "
        "(ps_incarnation > 0): sync steps every replica together");
  }
  // The replicas' own group, for the initial broadcast and early stopping's
  // decision (the PS tasks are not in it). A job that may restart one
  // replica has none, since a dead replica would break it for the others:
  // every replica starts from the same seed or checkpoint, each stops at the
  // spec's end on its own, and early stopping's decision goes through the
  // store (ShareEarlyStop).
  if (replicas > 1 && !restartable) {
    ASSIGN_OR_RETURN(auto comm, collective::CreateCommunicator(group_store_.get(), r.rank, replicas,
                                                               GlooForRanks(dp_globals_)));
    collective::Communicator* c = comm.get();
    Adopt(&r.comm, std::move(comm));
    RETURN_IF_ERROR(BroadcastInitialState(r, c));
    RETURN_IF_ERROR(CheckResumePosition(r));
  }
  ASSIGN_OR_RETURN(ps::ShardMap map,
                   ps::BuildShardMap(r.model->params().flat_values().numel(), ps_tasks_));
  ASSIGN_OR_RETURN(auto links,
                   ps::ConnectWorkerLinks(ps_store_.get(), r.rank, options_.ps_incarnation, map,
                                          [&](int ps) { return LinkOptions(r.rank, ps); }));
  ASSIGN_OR_RETURN(auto client, ps::PsClient::Create(std::move(links), r.rank, std::move(map),
                                                     collective_timeout_));
  // Each shard goes out as soon as backward has finished its parameters.
  std::vector<std::pair<int64_t, int64_t>> params;
  for (const auto& e : r.model->params().entries()) {
    params.emplace_back(e.offset, engine::NumElements(e.shape));
  }
  if (!options_.ps_push_after_backward) client->SetParams(params);
  if (options_.ps_incarnation > 0) {
    // Restarted while the others went on: the values as trained so far, and
    // the data from the first step it had not pushed (a global step, so
    // right in an attempt that resumed from a checkpoint too).
    RETURN_IF_ERROR(client->Rejoin(r.model->params().flat_values().data<float>()));
    r.rejoin_step = std::min(client->rejoined_pushed(), total_steps_);
  } else {
    // Its first push is of the step the attempt resumed at.
    RETURN_IF_ERROR(client->StartAt(step_));
  }
  absl::MutexLock l(&comm_mu_);
  if (options_.ps_incarnation > 0 && options_.progress != nullptr) {
    // Into the job's log (under comm_mu_: the replicas rejoin on threads).
    options_.progress->OnInfo(absl::StrFormat(
        "replica %d rejoined its PS tasks (incarnation %d): its data resumes at step %d, its "
        "staleness clock at %d",
        r.rank, options_.ps_incarnation, r.rejoin_step, client->clock()));
  }
  if (aborted_) client->Abort();
  r.ps_client = std::move(client);
  return absl::OkStatus();
}

absl::Status Trainer::RestorePsShard(Replica& r, const engine::Checkpoint& ck,
                                     const std::string& path) {
  if (r.ps_shard.count == 0) return absl::OkStatus();
  auto slice = [&](const std::string& name, engine::Tensor* dst) -> absl::Status {
    const engine::Tensor* src = ck.Find(name);
    if (src == nullptr || src->dtype() != engine::DType::kF32 ||
        src->numel() < r.ps_shard.offset + r.ps_shard.count) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", path, ": '", name, "' does not hold PS task ", r.ps_index,
                       "'s shard of ", r.ps_shard.count, " values at ", r.ps_shard.offset));
    }
    std::memcpy(dst->raw(), src->data<float>() + r.ps_shard.offset,
                static_cast<size_t>(r.ps_shard.count) * sizeof(float));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(slice("params", &r.ps_values));
  r.ps_state.clear();
  for (const auto& named : replicas_[0]->optimizer->State()) {
    ASSIGN_OR_RETURN(
        engine::Tensor t,
        engine::Tensor::Allocate({r.ps_shard.count}, engine::DType::kF32, engine::Device::CPU(),
                                 absl::StrCat("PS task ", r.ps_index, "'s ", named.first)));
    RETURN_IF_ERROR(slice("optim/" + named.first, &t));
    r.ps_state.emplace_back(named.first, std::move(t));
  }
  r.ps_state_steps = ck.header.optimizer_step();
  r.ps_resumed = true;
  return absl::OkStatus();
}

absl::Status Trainer::RunPsTask(Replica& r) {
  if (r.ps_shard.count == 0) {
    spdlog::info("PS task {} holds no shard: the model is too small for {} PS tasks", r.ps_index,
                 ps_tasks_);
    return absl::OkStatus();
  }
  const ps::Shard& shard = r.ps_shard;
  const v1::TrainingSpec& tr = spec_.training();
  const v1::DistributionSpec& d = spec_.distribution();
  const int replicas = data_parallel_ranks();
  ps::ServerOptions so;
  so.consistency = ConsistencyOf(d);
  so.max_staleness = d.max_staleness();
  so.timeout = collective_timeout_;
  so.start_step = step_;  // every replica resumed from the same checkpoint
  const int ps = r.ps_index;
  so.link_options = [this, ps](int replica) { return LinkOptions(replica, ps); };
  // The schedule counts the shard's updates: one per step, or under async
  // one per push of every replica.
  const int64_t updates =
      so.consistency == ps::Consistency::kAsync ? total_steps_ * replicas : total_steps_;
  ASSIGN_OR_RETURN(auto schedule, engine::CreateSchedule(tr.schedule(), tr.optimizer().lr(),
                                                         std::max<int64_t>(updates, 1)));
  ASSIGN_OR_RETURN(auto server, ps::ShardServer::Create(ps_store_.get(), replicas, shard,
                                                        r.ps_values.data<float>(), tr.optimizer(),
                                                        std::move(schedule), so));
  // The shard's part of the optimizer state this process restored, and the
  // update count the schedule goes on from (plain SGD has only the count); a
  // fresh start's server begins at zeros and step 0.
  if (r.ps_resumed) RETURN_IF_ERROR(server->RestoreOptimizer(r.ps_state, r.ps_state_steps));
  // The server holds its own copies now.
  r.ps_values = engine::Tensor();
  r.ps_state.clear();
  {
    absl::MutexLock l(&comm_mu_);
    if (aborted_) server->Abort();
    r.ps_server = std::move(server);
  }
  return r.ps_server->Run();
}

absl::Status Trainer::SavePsCheckpoint(Replica& r, const std::string& path) {
  if (r.ps_task || r.rank != 0) return absl::OkStatus();
  if (&r != replicas_[0].get() || r.ps_client == nullptr) {
    return absl::InternalError("trainer: a PS job's checkpoint is the chief replica's to write");
  }
  // The snapshot lands in the chief's own buffers: its replica's optimizer
  // is idle in a PS job, and the values are at least as fresh as the ones it
  // pulled, so its next step may use them.
  std::vector<float*> state;
  for (auto& [name, t] : r.optimizer->State()) state.push_back(t.data<float>());
  int64_t steps = 0;
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(
      r.ps_client->Snapshot(r.model->params().flat_values().data<float>(), state, &steps));
  r.optimizer->set_step_count(steps);
  spdlog::debug("PS snapshot for {} took {:.3f} s", path, Seconds(Clock::now() - t0));
  return SaveCheckpoint(path);
}

absl::Status Trainer::MaybeDepart(LoopState& s) {
  if (options_.ps_depart_after_steps <= 0 || !s.rep.ps_client ||
      s.step < options_.ps_depart_after_steps) {
    return absl::OkStatus();
  }
  {
    absl::MutexLock l(&comm_mu_);
    s.rep.ps_client.reset();  // its links close without a leave
  }
  return absl::AbortedError(absl::StrCat("trainer: replica ", s.rep.rank, " departed after step ",
                                         s.step, " (ps_depart_after_steps)"));
}

absl::Status Trainer::BeginPsStep(LoopState& s, int64_t n) {
  engine::ParamSet& ps = s.rep.model->params();
  return s.rep.ps_client->BeginStep(ps.flat_grads().data<float>(), ps.flat_values().data<float>(),
                                    n);
}

absl::Status Trainer::FinishPsStep(LoopState& s) {
  const auto t0 = Clock::now();
  const double waited = s.rep.ps_client->stats().wait_seconds;
  RETURN_IF_ERROR(s.rep.ps_client->FinishStep());
  const double seconds = Seconds(Clock::now() - t0);
  s.window.comm += seconds;
  s.window.exposed += seconds;
  s.window.ps_wait += s.rep.ps_client->stats().wait_seconds - waited;
  return absl::OkStatus();
}

void Trainer::FillPsWindow(LoopState& s, double window_seconds, v1::PsWindow* out) {
  if (s.rep.ps_client) out->set_pushes(s.rep.ps_client->stats().pushes);
  out->set_wait_seconds(s.window.ps_wait);
  // The PS tasks run on their own threads; their servers are set under
  // comm_mu_ and publish their figures for any thread.
  absl::MutexLock l(&comm_mu_);
  for (const auto& r : replicas_) {
    if (!r->ps_task) continue;
    out->set_ps_tasks(out->ps_tasks() + 1);
    if (!r->ps_server) continue;
    const ps::ServerStats st = r->ps_server->stats();
    out->set_updates(out->updates() + st.updates);
    out->set_queue_depth(out->queue_depth() + st.pending_pushes);
    out->set_held_answers(out->held_answers() + st.held_answers);
  }
  out->set_updates_per_second(static_cast<double>(out->updates() - s.ps_updates_reported) /
                              std::max(window_seconds, 1e-9));
  s.ps_updates_reported = out->updates();
}

void Trainer::ReportPs(bool end) const {
  if (options_.progress == nullptr) return;
  const v1::DistributionSpec& d = spec_.distribution();
  if (!end) {
    std::vector<std::string> tasks;
    for (const auto& r : replicas_) {
      if (r->ps_task) tasks.push_back(absl::StrCat(r->ps_index));
    }
    options_.progress->OnInfo(absl::StrFormat(
        "parameter servers: %d PS tasks, %s consistency%s, for %d replicas; this process runs "
        "%s",
        ps_tasks_, d.consistency().empty() ? "sync" : d.consistency(),
        d.consistency() == "bounded" ? absl::StrCat(" (max_staleness ", d.max_staleness(), ")")
                                     : std::string(),
        data_parallel_ranks(),
        tasks.empty()
            ? std::string("no PS task")
            : absl::StrCat("PS task", tasks.size() > 1 ? "s " : " ", absl::StrJoin(tasks, ", "))));
    return;
  }
  for (const auto& r : replicas_) {
    if (r->ps_server) {
      const ps::ServerStats& st = r->ps_server->stats();
      options_.progress->OnInfo(absl::StrFormat(
          "PS task %d: %d pushes, %d updates, %d answers held by the staleness gate, at most %d "
          "pushes waiting for their step",
          r->ps_index, st.pushes, st.updates, st.held_answers, st.max_pending_pushes));
      // The audit of the data: each replica's steps reached the shard in
      // order and each once (the server refuses a repeat or a gap).
      for (size_t w = 0; w < st.workers.size(); ++w) {
        const ps::ServerStats::WorkerData& d = st.workers[w];
        options_.progress->OnInfo(absl::StrFormat(
            "PS task %d: replica %d's data steps %d to %d, each once: %d pushed, %d lost with a "
            "killed incarnation",
            r->ps_index, w, d.first_step, d.next_step - 1, d.pushes, d.lost));
      }
    } else if (r->ps_client) {
      const ps::ClientStats& st = r->ps_client->stats();
      options_.progress->OnInfo(
          absl::StrFormat("replica %d: %d pushes, %.2f s waiting for parameters (longest %.3f s)",
                          r->rank, st.pushes, st.wait_seconds, st.longest_wait));
    }
  }
}

}  // namespace yoke::worker
