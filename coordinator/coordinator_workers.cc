// The Coordinator (coordinator/coordinator.h), part 3 of 5: the worker
// protocol: registration, heartbeats, the desired state sent back, and the
// devices of stopped attempts released once their trainers are gone.
// Applying each reported AttemptStatus is coordinator_status.cc.
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/quote.h"
#include "common/status.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_internal.h"
#include "openssl/crypto.h"
#include "spdlog/spdlog.h"

namespace yoke::server {

namespace {

// Compares secrets in time that does not depend on where they differ.
bool SameSecret(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

using coordinator_internal::AttemptKey;
using coordinator_internal::ShareOf;

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& req, const std::string& bound_id) {
  const std::string& requested_id = bound_id.empty() ? req.worker_id() : bound_id;
  std::set<std::pair<std::string, int>> seen;
  for (int i = 0; i < req.devices_size(); ++i) {
    const v1::Device& d = req.devices(i);
    if (d.kind() != "cpu" && d.kind() != "cuda") {
      return absl::InvalidArgumentError(absl::StrCat("devices[", i, "].kind: unknown device kind ",
                                                     common::Quote(d.kind()),
                                                     " (known: cpu, cuda)"));
    }
    if (d.index() < 0 || !seen.insert({d.kind(), d.index()}).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "devices[", i, "].index: ", d.kind(), " index ", d.index(), " is negative or repeated"));
    }
  }
  // An IP address or a DNS name (253 characters at most).
  if (req.address().size() > 253) {
    return absl::InvalidArgumentError(
        absl::StrCat("address: at most 253 characters, got ", req.address().size()));
  }
  // An id is proven by its incarnation token. A certificate-bound id needs
  // none (the certificate proves it), but a stale token is still refused.
  if (options_.worker_incarnation && !requested_id.empty() &&
      (bound_id.empty() || !req.incarnation().empty()) &&
      !SameSecret(req.incarnation(), options_.worker_incarnation(requested_id))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker id ", common::Quote(requested_id),
        req.incarnation().empty() ? " was given without its incarnation token"
                                  : " does not match its incarnation token",
        ": it belongs to another daemon (or to an earlier store); register without an id to "
        "get a new one"));
  }
  absl::MutexLock lock(&mu_);
  std::string new_id;
  if (requested_id.empty() && options_.next_worker_number) {
    // Numbers come from the store, so an id outlives coordinator restarts
    // and is never handed to a second daemon.
    do {
      ASSIGN_OR_RETURN(int64_t n, options_.next_worker_number());
      new_id = absl::StrCat("w-", n);
    } while (registry_.Find(new_id) != nullptr);
  }
  const std::string& use_id = requested_id.empty() ? new_id : requested_id;
  const WorkerEntry* before = use_id.empty() ? nullptr : registry_.Find(use_id);
  const bool was_alive = before != nullptr && before->registered && before->alive;
  const std::string id = registry_.Register(
      use_id, req.hostname(), std::vector<v1::Device>(req.devices().begin(), req.devices().end()));
  registry_.SetAddress(id, req.address());
  spdlog::info("worker {} registered ({}, address {}, {} devices, {} attempts running){}", id,
               req.hostname(), req.address().empty() ? "unknown" : req.address(),
               req.devices_size(), req.attempts_size(), was_alive ? " again while alive" : "");
  for (const v1::AttemptStatus& st : req.attempts()) ApplyStatus(id, st);
  // A share that had reported in but is not listed lost its trainer (the
  // worker restarted, or its trainer died while we were down).
  auto jobs = by_worker_.find(id);
  if (jobs != by_worker_.end()) {
    const std::set<std::string> ids = jobs->second;  // FailAttempt edits the index
    for (const std::string& job_id : ids) {
      ActiveJob& aj = active_.at(job_id);
      v1::Attempt* a = CurrentAttempt(aj);
      // (A share whose exit was recorded is done: its worker forgot it.)
      if (a == nullptr || !aj.reported.count(id) || aj.exited.count(id)) continue;
      bool listed = false;
      for (const v1::AttemptStatus& st : req.attempts()) {
        listed |= st.job_id() == job_id && st.attempt() == a->number();
      }
      if (!listed) {
        FailAttempt(aj,
                    absl::StrCat("worker ", id, " registered again without attempt ", a->number(),
                                 " (its trainer is gone)"),
                    /*retryable=*/true);
      }
    }
  }
  ReleaseDrained(id, req.attempts());
  schedule_needed_ = true;
  v1::RegisterWorkerResponse resp;
  resp.set_worker_id(id);
  if (options_.worker_incarnation) resp.set_incarnation(options_.worker_incarnation(id));
  resp.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(const v1::HeartbeatRequest& req) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("worker_id: required");
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(registry_.Heartbeat(req.worker_id()));
  if (req.draining()) registry_.SetDraining(req.worker_id());
  for (const v1::AttemptStatus& st : req.attempts()) ApplyStatus(req.worker_id(), st);
  ReleaseDrained(req.worker_id(), req.attempts());
  if (schedule_needed_) RunScheduler();
  v1::HeartbeatResponse resp;
  for (v1::DesiredAttempt& d : DesiredFor(req.worker_id(), req.attempts())) {
    *resp.add_desired() = std::move(d);
  }
  return resp;
}

void Coordinator::ReleaseDrained(
    const std::string& worker_id,
    const google::protobuf::RepeatedPtrField<v1::AttemptStatus>& observed) {
  auto it = draining_.find(worker_id);
  if (it == draining_.end()) return;
  for (auto d = it->second.begin(); d != it->second.end();) {
    bool still_running = false;
    for (const v1::AttemptStatus& st : observed) {
      still_running |= AttemptKey(st.job_id(), st.attempt()) == d->first &&
                       st.phase() != v1::AttemptStatus::EXITED;
    }
    if (still_running) {
      ++d;
    } else {
      d = it->second.erase(d);
      schedule_needed_ = true;
    }
  }
  if (it->second.empty()) draining_.erase(it);
}

std::vector<v1::DesiredAttempt> Coordinator::DesiredFor(
    const std::string& worker_id,
    const google::protobuf::RepeatedPtrField<v1::AttemptStatus>& observed) {
  std::vector<v1::DesiredAttempt> out;
  auto jobs = by_worker_.find(worker_id);
  if (jobs == by_worker_.end()) return out;
  for (const std::string& job_id : jobs->second) {
    ActiveJob& aj = active_.at(job_id);
    const v1::Attempt* a = CurrentAttempt(aj);
    const v1::Assignment* share = a ? ShareOf(*a, worker_id) : nullptr;
    if (share == nullptr || aj.exited.count(worker_id)) continue;
    v1::DesiredAttempt& d = out.emplace_back();
    d.set_job_id(job_id);
    d.set_attempt(a->number());
    // The spec goes out until the worker lists the attempt: then it has
    // started it from a copy it keeps, and the digest names that copy.
    bool reported = false;
    for (const v1::AttemptStatus& st : observed) {
      reported |= st.job_id() == job_id && st.attempt() == a->number();
    }
    if (!reported) {
      // Held serialized (ActiveJob); stored by this coordinator, so it parses.
      if (!d.mutable_spec()->ParseFromString(*aj.spec)) {
        spdlog::error("{}: the held spec does not parse", job_id);
      }
      // Who runs every rank, for the trainer's messages about its peers.
      d.mutable_rank_workers()->Reserve(a->world_size());
      for (const v1::Assignment& as : a->assignments()) {
        const WorkerEntry* w = registry_.Find(as.worker_id());
        for (int r = 0; r < as.num_replicas(); ++r) {
          const int rank = as.first_rank() + r;
          while (d.rank_workers_size() <= rank) d.add_rank_workers();
          while (d.rank_addresses_size() <= rank) d.add_rank_addresses();
          d.set_rank_workers(rank, as.worker_id());
          d.set_rank_addresses(rank, w != nullptr ? w->address : "");
        }
      }
    }
    d.set_spec_digest(aj.spec_digest);
    d.set_world_size(a->world_size());
    d.set_first_rank(share->first_rank());
    d.set_num_replicas(share->num_replicas());
    *d.mutable_devices() = share->devices();
    d.set_resume(a->number() > 1);
    d.set_incarnation(share->incarnation());
    if (!reported) {
      // The trainer checks its paths again where the files are.
      *d.mutable_data_roots() = {options_.data_roots.begin(), options_.data_roots.end()};
      *d.mutable_checkpoint_roots() = {options_.checkpoint_roots.begin(),
                                       options_.checkpoint_roots.end()};
    }
    if (!reported && options_.rendezvous_secret) {
      d.set_rendezvous_secret(options_.rendezvous_secret(job_id, a->number()));
    }
  }
  return out;
}

}  // namespace yoke::server
