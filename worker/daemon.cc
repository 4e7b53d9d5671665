#include "worker/daemon.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/omp_env.h"
#include "common/status.h"
#include "jobspec/job_spec_binary.h"
#include "worker/devices.h"
#include "worker/worker_metrics.h"

namespace yoke::worker {
namespace {

// Job ids become directory names: allow only what cannot escape work_dir.
bool IsSafePathComponent(const std::string& s) {
  if (s.empty() || s == "." || s == ".." || s.size() > 200) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// A trainer that could not be started reports this exit code (as a shell
// does for a command it cannot run).
constexpr int kExitCannotStart = 127;

}  // namespace

// ------------------------------------------------------------ daemon

struct WorkerDaemon::Attempt {
  v1::DesiredAttempt desired;
  std::string key;                        // "job_id/attempt"
  std::unique_ptr<TrainerLauncher> proc;  // null if it could not be started
  std::string start_error;
  // Why the daemon stopped it; replaces the reason of a non-zero exit.
  std::string stop_reason;
  bool stop_sent = false;
  bool exit_logged = false;
  bool digest_mismatch_logged = false;
  // What the coordinator has acknowledged, and what the heartbeat in flight
  // carries (acknowledged when its reply arrives).
  size_t acked_epochs = 0, sent_epochs = 0;
  int64_t acked_log_seq = 0, sent_log_seq = 0;
  bool sent_exit = false, exit_acked = false;
  // The share's incarnation its trainer runs (DesiredAttempt.incarnation).
  int incarnation = 0;

  bool exited() const { return !proc || proc->State().exited; }
};

WorkerDaemon::WorkerDaemon(WorkerDaemonOptions options, CoordinatorClient* client)
    : options_(std::move(options)),
      client_(client),
      interval_(options_.heartbeat_interval),
      backoff_(options_.initial_backoff) {}

WorkerDaemon::~WorkerDaemon() = default;

std::string WorkerDaemon::worker_id() const {
  absl::MutexLock l(&mu_);
  return worker_id_;
}

void WorkerDaemon::Shutdown() {
  absl::MutexLock l(&mu_);
  shutdown_ = true;
}

bool WorkerDaemon::SleepUnlessShutdown(absl::Duration d) {
  absl::MutexLock l(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&shutdown_), d);
}

void WorkerDaemon::NoteRpc(const absl::Status& s) {
  if (s.ok()) {
    if (outage_) {
      spdlog::info(
          "coordinator {} reachable again after {}", options_.coordinator_address,
          absl::FormatDuration(absl::Trunc(absl::Now() - outage_start_, absl::Milliseconds(100))));
    }
    outage_ = false;
    backoff_ = options_.initial_backoff;
    return;
  }
  if (!outage_) {
    outage_ = true;
    outage_start_ = absl::Now();
    spdlog::warn("coordinator {} unreachable: {}; trainers keep running, retrying every {} at most",
                 options_.coordinator_address, s.ToString(),
                 absl::FormatDuration(options_.max_backoff));
  }
}

void WorkerDaemon::FillStatus(Attempt* a, bool for_heartbeat, v1::AttemptStatus* out) {
  out->set_job_id(a->desired.job_id());
  out->set_attempt(a->desired.attempt());
  out->set_incarnation(a->incarnation);
  if (!a->proc) {
    out->set_phase(v1::AttemptStatus::EXITED);
    out->set_exit_code(kExitCannotStart);
    out->set_reason(a->start_error);
    if (for_heartbeat) a->sent_exit = true;
    return;
  }
  TrainerState st = a->proc->State();
  out->set_pid(st.pid);
  if (st.has_progress) *out->mutable_progress() = st.progress;
  bool all_sent = true;
  if (for_heartbeat) {
    const size_t known = st.epochs_forgotten + st.epochs.size();
    for (size_t i = std::max(a->acked_epochs, st.epochs_forgotten); i < known; ++i) {
      *out->add_epochs() = st.epochs[i - st.epochs_forgotten];
    }
    a->sent_epochs = known;
    std::string id = worker_id();
    a->sent_log_seq = a->acked_log_seq;
    size_t bytes = 0;
    for (const TrainerLogLine& l :
         a->proc->LogsSince(a->acked_log_seq, options_.max_log_lines_per_heartbeat)) {
      // Stay far below gRPC's 4 MiB message limit; the rest follows.
      bytes += l.text.size();
      if (bytes > options_.max_log_bytes_per_heartbeat && out->logs_size() > 0) break;
      v1::LogLine* ll = out->add_logs();
      ll->set_seq(l.seq);
      ll->set_time_ms(l.time_ms);
      ll->set_attempt(a->desired.attempt());
      ll->set_rank(a->desired.first_rank());
      ll->set_worker_id(id);
      ll->set_text(l.text);
      a->sent_log_seq = l.seq;
    }
    all_sent = a->sent_log_seq == st.last_log_seq;
  }
  // EXITED goes out only with the attempt's last log lines, so the
  // coordinator may treat it as final; until then the attempt reads as
  // running (its output is still being delivered).
  const bool exited = st.exited && all_sent;
  if (for_heartbeat) a->sent_exit = exited;
  out->set_phase(exited        ? v1::AttemptStatus::EXITED
                 : st.reported ? v1::AttemptStatus::RUNNING
                               : v1::AttemptStatus::STARTING);
  if (!exited) return;
  out->set_exit_code(st.exit_code);
  out->set_reason(st.exit_code != 0 && !a->stop_reason.empty()
                      ? absl::StrCat(a->stop_reason, " (", st.reason, ")")
                      : st.reason);
  if (st.exit_code == 0 && st.has_result) *out->mutable_result() = st.result;
  if (!a->exit_logged) {
    a->exit_logged = true;
    if (options_.metrics) {
      options_.metrics->OnEnd(a->desired.job_id(), a->desired.first_rank());
    }
    if (st.exit_code == 0) {
      spdlog::info("{} finished (exit 0)", a->key);
    } else {
      spdlog::warn("{} exited with code {}: {}", a->key, st.exit_code, out->reason());
    }
  }
}

std::vector<v1::AttemptStatus> WorkerDaemon::ObservedAttempts() {
  std::vector<v1::AttemptStatus> out;
  for (auto& [key, a] : attempts_) {
    out.emplace_back();
    FillStatus(a.get(), false, &out.back());
  }
  return out;
}

namespace {
// A refusal is an answer, not an outage: the coordinator is up.
absl::Status Answered(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition ? absl::OkStatus() : s;
}
}  // namespace

absl::Status WorkerDaemon::Register() {
  v1::RegisterWorkerRequest req;
  req.set_hostname(options_.hostname);
  req.set_address(options_.advertise_address);
  for (const v1::Device& d : options_.devices) *req.add_devices() = d;
  req.set_worker_id(worker_id());
  req.set_incarnation(incarnation_);
  // Exited attempts the coordinator has not recorded are listed too: one
  // that finished while the coordinator was down must not read as a lost
  // trainer. They carry their unacknowledged output like a heartbeat.
  for (auto& [key, a] : attempts_) FillStatus(a.get(), true, req.add_attempts());
  auto resp = client_->RegisterWorker(req);
  if (!resp.ok() && resp.status().code() == absl::StatusCode::kFailedPrecondition &&
      !req.worker_id().empty()) {
    // The id is no longer ours to claim (the coordinator's store was
    // replaced, or another daemon proved it): start over as a new worker.
    // The attempts run under the old id belong to nobody the coordinator
    // knows, so their trainers stop.
    spdlog::warn("coordinator {} refused id {}: {}; registering as a new worker",
                 options_.coordinator_address, req.worker_id(),
                 std::string(resp.status().message()));
    StopAll(absl::StrCat("the coordinator no longer accepts worker id ", req.worker_id()));
    {
      absl::MutexLock l(&mu_);
      worker_id_.clear();
    }
    incarnation_.clear();
    return resp.status();
  }
  if (!resp.ok()) return resp.status();
  MarkSentAsAcked();
  if (resp->worker_id().empty()) {
    return absl::InternalError("RegisterWorker: the coordinator returned an empty worker id");
  }
  {
    absl::MutexLock l(&mu_);
    worker_id_ = resp->worker_id();
  }
  incarnation_ = resp->incarnation();
  if (resp->heartbeat_interval_ms() > 0) {
    interval_ = absl::Milliseconds(resp->heartbeat_interval_ms());
  }
  registered_ = true;
  const bool first = !registered_once_;
  registered_once_ = true;
  if (first) {
    spdlog::info("registered as {} with {} ({} cpu, {} cuda devices), heartbeat every {}",
                 resp->worker_id(), options_.coordinator_address,
                 CountDevices(options_.devices, "cpu"), CountDevices(options_.devices, "cuda"),
                 absl::FormatDuration(interval_));
  } else {
    spdlog::info("registered again as {} with {}, listing {} attempts", resp->worker_id(),
                 options_.coordinator_address, req.attempts_size());
  }
  if (on_registered) on_registered(resp->worker_id(), first);
  return absl::OkStatus();
}

void WorkerDaemon::MarkSentAsAcked() {
  for (auto& [key, a] : attempts_) {
    a->acked_epochs = a->sent_epochs;
    if (a->proc) a->proc->ForgetEpochs(a->acked_epochs);
    a->acked_log_seq = a->sent_log_seq;
    if (a->sent_exit) a->exit_acked = true;
  }
}

absl::Status WorkerDaemon::Tick() {
  if (!registered_) {
    absl::Status s = Register();
    NoteRpc(Answered(s));
    if (!s.ok()) return s;
  }
  v1::HeartbeatRequest req;
  req.set_worker_id(worker_id());
  req.set_draining(draining_);
  for (auto& [key, a] : attempts_) FillStatus(a.get(), true, req.add_attempts());
  auto resp = client_->Heartbeat(req);
  if (!resp.ok() && resp.status().code() == absl::StatusCode::kNotFound) {
    spdlog::info("coordinator {} does not know worker {} ({}); registering again",
                 options_.coordinator_address, worker_id(), std::string(resp.status().message()));
    NoteRpc(absl::OkStatus());  // it answered: not an outage
    registered_ = false;
    absl::Status s = Register();
    NoteRpc(Answered(s));
    return s;
  }
  NoteRpc(resp.status());
  if (!resp.ok()) return resp.status();
  MarkSentAsAcked();
  Reconcile(*resp);
  return absl::OkStatus();
}

void WorkerDaemon::Reconcile(const v1::HeartbeatResponse& response) {
  std::set<std::string> desired;
  for (const v1::DesiredAttempt& d : response.desired()) {
    std::string key = absl::StrCat(d.job_id(), "/", d.attempt());
    if (!desired.insert(key).second) continue;  // listed twice: start once
    auto known = attempts_.find(key);
    if (known != attempts_.end()) {
      CheckSameSpec(known->second.get(), d);
      Attempt& a = *known->second;
      // Restarted alone: the coordinator has recorded how the last
      // incarnation ended, and wants the next.
      if (d.incarnation() > a.incarnation && a.exited() && !draining_)
        Relaunch(&a, d.incarnation());
      continue;
    }
    if (draining_) continue;
    StartAttempt(d);
  }
  for (auto it = attempts_.begin(); it != attempts_.end();) {
    Attempt& a = *it->second;
    if (desired.count(it->first)) {
      ++it;
      continue;
    }
    if (a.exited()) {
      if (a.exit_acked) {
        it = attempts_.erase(it);  // the coordinator has recorded its end
        continue;
      }
    } else if (!a.stop_sent) {
      spdlog::info("stopping {} (pid {}): no longer desired; SIGKILL after {}", a.key,
                   a.proc->pid(), absl::FormatDuration(options_.stop_grace));
      a.stop_reason = "stopped: no longer desired by the coordinator";
      a.proc->Stop(options_.stop_grace);
      a.stop_sent = true;
    }
    ++it;
  }
}

void WorkerDaemon::CheckSameSpec(Attempt* a, const v1::DesiredAttempt& d) {
  const std::string& ran = a->desired.spec_digest();
  if (d.spec_digest().empty() || ran.empty() || d.spec_digest() == ran ||
      a->digest_mismatch_logged) {
    return;
  }
  // (job, attempt) names one spec for good; a new spec comes as a new attempt.
  a->digest_mismatch_logged = true;
  spdlog::error(
      "{}: the coordinator now lists spec digest {}, but this worker runs {}; "
      "keeping the running trainer",
      a->key, absl::BytesToHexString(d.spec_digest()), absl::BytesToHexString(ran));
}

absl::Status WorkerDaemon::PrepareAttempt(Attempt* a, TrainerLauncherOptions* opts) {
  const v1::DesiredAttempt& d = a->desired;
  if (!d.has_spec()) {
    // The coordinator leaves the spec out only once this worker listed the
    // attempt, so this worker lost it, or the coordinator is wrong.
    return absl::FailedPreconditionError(
        "the coordinator listed the attempt without its spec, which it sends only to a worker "
        "that does not report the attempt yet");
  }
  if (!IsSafePathComponent(d.job_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_id: must be letters, digits, '-', '_' or '.', got '", d.job_id(), "'"));
  }
  if (d.attempt() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("attempt: must be >= 1, got ", d.attempt()));
  }
  const int world = d.world_size() > 0 ? d.world_size() : 1;
  if (d.first_rank() < 0 || d.first_rank() >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("first_rank: must be in [0, ", world, "), got ", d.first_rank()));
  }
  if (d.first_rank() + std::max(d.num_replicas(), 1) > world) {
    return absl::InvalidArgumentError(absl::StrCat("num_replicas: ranks ", d.first_rank(), "..",
                                                   d.first_rank() + d.num_replicas() - 1,
                                                   " do not fit a world of ", world));
  }
  std::filesystem::path dir =
      std::filesystem::path(options_.work_dir) / d.job_id() / absl::StrCat("attempt-", d.attempt());
  if (a->incarnation > 0) dir /= absl::StrCat("incarnation-", a->incarnation);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  // The coordinator validated the spec at submit; the trainer reads it as
  // is, without a second parse of YAML or a second validation.
  const std::string spec_path = (dir / "job.pb").string();
  RETURN_IF_ERROR(common::WriteJobSpecFile(spec_path, d.spec()));
  opts->binary = options_.trainer_path;
  // The trainer exits by itself a little before this daemon's SIGKILL would
  // come, saying why, if no step boundary lets it stop sooner.
  const absl::Duration trainer_grace =
      options_.stop_grace - std::min(absl::Seconds(1), options_.stop_grace / 5);
  opts->args = {"--spec-file",  spec_path,
                "--output",     "events",
                "--rank",       absl::StrCat(d.first_rank()),
                "--world-size", absl::StrCat(world),
                "--stop-grace", absl::FormatDuration(trainer_grace)};
  if (world > 1) {
    // Ranks [first_rank, first_rank + replicas) run here as threads; the
    // trainer meets the other ranks through the attempt's rendezvous
    // namespace on the coordinator this daemon talks to. A world of one
    // needs no rendezvous and gets the single-process command line.
    const int replicas = d.num_replicas() > 0 ? d.num_replicas() : 1;
    opts->args.insert(
        opts->args.end(),
        {"--replicas", absl::StrCat(replicas), "--coordinator", options_.coordinator_address,
         "--job-id", d.job_id(), "--attempt", absl::StrCat(d.attempt()), "--gloo-hostname",
         options_.advertise_address.empty() ? "127.0.0.1" : options_.advertise_address});
    // Who runs each rank ("w-1@10.0.0.5"), for the trainer's messages.
    if (d.rank_workers_size() == world) {
      std::vector<std::string> hosts;
      for (int r = 0; r < world; ++r) {
        hosts.push_back(absl::StrCat(d.rank_workers(r), "@",
                                     r < d.rank_addresses_size() ? d.rank_addresses(r) : ""));
      }
      opts->args.insert(opts->args.end(), {"--rank-hosts", absl::StrJoin(hosts, ",")});
    }
  }
  for (const std::string& root : d.data_roots()) {
    opts->args.insert(opts->args.end(), {"--data-root", root});
  }
  for (const std::string& root : d.checkpoint_roots()) {
    opts->args.insert(opts->args.end(), {"--checkpoint-root", root});
  }
  // A retry continues from the newest valid checkpoint the trainer finds in
  // checkpoint.dir, on this machine's view of it.
  if (d.resume() && !d.spec().checkpoint().dir().empty()) {
    opts->args.insert(opts->args.end(), {"--resume-latest", d.spec().checkpoint().dir()});
  }
  if (a->incarnation > 0) {
    opts->args.insert(opts->args.end(), {"--ps-incarnation", absl::StrCat(a->incarnation)});
  }
  opts->args.insert(opts->args.end(), options_.trainer_args.begin(), options_.trainer_args.end());
  opts->work_dir = dir.string();
  opts->log_path = (dir / "trainer.log").string();
  opts->max_log_lines = options_.max_log_lines_buffered;
  // The shares of the ranks it runs, as the coordinator counted them.
  opts->memory_cgroups = options_.memory_cgroups;
  opts->memory_limit_bytes = options_.replica_memory_bytes * std::max(d.num_replicas(), 1);
  opts->env = {absl::StrCat("YOKE_JOB_ID=", d.job_id()), absl::StrCat("YOKE_ATTEMPT=", d.attempt()),
               absl::StrCat("YOKE_WORKER_ID=", worker_id())};
  if (std::optional<std::string> spin = common::TrainerOmpSpinEnv()) {
    opts->env.push_back(*spin);
  }
  if (!options_.tls_ca_path.empty()) {
    opts->env.push_back(absl::StrCat("YOKE_TLS_CA=", options_.tls_ca_path));
  }
  if (!d.rendezvous_secret().empty()) {
    opts->env.push_back(absl::StrCat("YOKE_RENDEZVOUS_SECRET=", d.rendezvous_secret()));
  }
  if (d.spec().distribution().device() == "cuda") {
    // The trainer numbers its GPUs from 0 in assignment order.
    opts->env.push_back(absl::StrCat("CUDA_VISIBLE_DEVICES=", absl::StrJoin(d.devices(), ",")));
  }
  return absl::OkStatus();
}

void WorkerDaemon::StartAttempt(const v1::DesiredAttempt& desired) {
  auto a = std::make_unique<Attempt>();
  a->desired = desired;
  a->key = absl::StrCat(desired.job_id(), "/", desired.attempt());
  a->incarnation = desired.incarnation();
  Launch(a.get());
  std::string key = a->key;
  attempts_[key] = std::move(a);
}

void WorkerDaemon::Relaunch(Attempt* a, int incarnation) {
  spdlog::info("{}: starting its trainer again as incarnation {} (the last exited with code {})",
               a->key, incarnation, a->proc ? a->proc->State().exit_code : kExitCannotStart);
  // The attempt's spec and placement stay; the new process's output and
  // exit are counted afresh.
  const std::string key = a->key;
  v1::DesiredAttempt desired = std::move(a->desired);
  *a = Attempt();
  a->desired = std::move(desired);
  a->key = key;
  a->incarnation = incarnation;
  Launch(a);
}

void WorkerDaemon::Launch(Attempt* a) {
  const v1::DesiredAttempt& desired = a->desired;
  TrainerLauncherOptions opts;
  absl::Status s = PrepareAttempt(a, &opts);
  if (WorkerMetrics* m = options_.metrics) {
    opts.on_step = [m, job = desired.job_id(), rank = desired.first_rank()](
                       const v1::StepProgress& p) { m->OnStep(job, rank, p); };
  }
  if (s.ok()) {
    auto proc = TrainerLauncher::Start(opts);
    if (proc.ok()) {
      a->proc = *std::move(proc);
    } else {
      s = proc.status();
    }
  }
  if (!s.ok()) {
    a->start_error = absl::StrCat("cannot start the trainer: ", s.message());
    spdlog::error("{}: {}", a->key, a->start_error);
  } else {
    spdlog::info("started {} (ranks {}..{} of {}) as pid {} in {}", a->key, desired.first_rank(),
                 desired.first_rank() + std::max(desired.num_replicas(), 1) - 1,
                 std::max(desired.world_size(), 1), a->proc->pid(), opts.work_dir);
  }
}

bool WorkerDaemon::AnyRunning() const {
  for (const auto& [key, a] : attempts_) {
    if (!a->exited()) return true;
  }
  return false;
}

void WorkerDaemon::StopAll(const std::string& why) {
  for (auto& [key, a] : attempts_) {
    if (a->exited() || a->stop_sent) continue;
    spdlog::info("stopping {} (pid {}): {}", key, a->proc->pid(), why);
    a->stop_reason = absl::StrCat("stopped: ", why);
    a->proc->Stop(options_.stop_grace);
    a->stop_sent = true;
  }
}

absl::Status WorkerDaemon::Run() {
  while (true) {
    {
      absl::MutexLock l(&mu_);
      if (shutdown_) break;
    }
    absl::Status s = Tick();
    absl::Duration wait = interval_;
    if (!s.ok()) {
      wait = backoff_;
      backoff_ = std::min(backoff_ * 2, options_.max_backoff);
    }
    if (SleepUnlessShutdown(wait)) break;
  }

  // Graceful shutdown: no new attempts; stop ours and keep reporting until
  // they are gone, so the coordinator learns how each one ended.
  draining_ = true;
  StopAll("worker shutting down");
  const absl::Time deadline = absl::Now() + options_.stop_grace + absl::Seconds(5);
  absl::Time next_tick = absl::Now() + interval_;
  while (AnyRunning() && absl::Now() < deadline) {
    if (absl::Now() >= next_tick) {
      absl::Status s = Tick();
      next_tick = absl::Now() + (s.ok() ? interval_ : backoff_);
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  if (registered_) {
    absl::Status s = Tick();
    if (!s.ok()) spdlog::warn("last heartbeat failed: {}", s.ToString());
  }
  const std::string id = worker_id();
  spdlog::info("worker {}shut down", id.empty() ? "" : id + " ");
  return absl::OkStatus();
}

}  // namespace yoke::worker
