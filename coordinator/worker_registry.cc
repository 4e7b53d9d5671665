#include "coordinator/worker_registry.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/quote.h"

namespace yoke::server {

void WorkerRegistry::NoteId(const std::string& id) {
  int64_t n = 0;
  if (absl::StartsWith(id, "w-") && absl::SimpleAtoi(id.substr(2), &n) && n >= next_number_) {
    next_number_ = n + 1;
  }
}

std::string WorkerRegistry::Register(const std::string& requested_id, const std::string& hostname,
                                     const std::vector<v1::Device>& devices) {
  std::string id = requested_id;
  if (id.empty()) id = absl::StrCat("w-", next_number_);
  NoteId(id);
  const absl::Time now = clock_->Now();
  WorkerEntry& w = workers_[id];
  w.id = id;
  w.hostname = hostname;
  w.devices = devices;
  w.registered = true;
  w.alive = true;
  w.draining = false;
  w.reason.clear();
  w.last_heartbeat = now;
  w.register_time = now;
  return id;
}

void WorkerRegistry::SetDraining(const std::string& id) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.draining) return;
  it->second.draining = true;
  it->second.reason = "draining: the worker is shutting down";
}

void WorkerRegistry::SetAddress(const std::string& id, const std::string& address) {
  auto it = workers_.find(id);
  if (it != workers_.end()) it->second.address = address;
}

void WorkerRegistry::Expect(const std::string& id) {
  if (workers_.count(id)) return;
  NoteId(id);
  WorkerEntry& w = workers_[id];
  w.id = id;
  w.registered = false;
  w.alive = true;  // until the deadline passes
  w.reason = "awaiting re-registration after a coordinator restart";
  w.last_heartbeat = clock_->Now();
}

absl::Status WorkerRegistry::Heartbeat(const std::string& id) {
  auto it = workers_.find(id);
  if (it == workers_.end() || !it->second.registered || !it->second.alive) {
    return absl::NotFoundError(
        absl::StrCat("worker ", common::Quote(id), " is not registered; register again"));
  }
  it->second.last_heartbeat = clock_->Now();
  return absl::OkStatus();
}

std::vector<LostWorker> WorkerRegistry::CheckLiveness() {
  const absl::Time now = clock_->Now();
  std::vector<LostWorker> lost;
  for (auto it = workers_.begin(); it != workers_.end();) {
    WorkerEntry& w = it->second;
    if (!w.alive && now - w.lost_time > absl::Hours(1)) {
      it = workers_.erase(it);
      continue;
    }
    if (w.alive && now - w.last_heartbeat > deadline_) {
      w.alive = false;
      w.lost_time = now;
      w.reason = w.registered ? absl::StrCat("worker ", w.id, " missed heartbeats for ",
                                             absl::FormatDuration(deadline_))
                              : absl::StrCat("worker ", w.id, " did not register again within ",
                                             absl::FormatDuration(deadline_),
                                             " of the coordinator's restart");
      lost.push_back({w.id, w.reason});
    }
    ++it;
  }
  return lost;
}

const WorkerEntry* WorkerRegistry::Find(const std::string& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

bool WorkerRegistry::IsAlive(const std::string& id) const {
  const WorkerEntry* w = Find(id);
  return w != nullptr && w->registered && w->alive;
}

}  // namespace yoke::server
