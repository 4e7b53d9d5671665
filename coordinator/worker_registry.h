// WorkerRegistry: the workers the coordinator knows and whether they are
// alive.
//
// Liveness comes only from heartbeats: a worker whose last heartbeat (or
// registration) is older than the deadline is marked lost by
// CheckLiveness(), which reports it once so the coordinator can fail its
// attempts. A lost worker must register again (Heartbeat answers NOT_FOUND),
// which revives it; its old attempts are not revived.
//
// After a coordinator restart the registry is empty, but stored attempts
// still name their workers. Expect() reserves such an id: the worker counts
// as unregistered (Heartbeat answers NOT_FOUND so it registers again, listing
// what it runs) and is lost if it does not register within one deadline of
// the Expect() call, which gives every worker one deadline to come back.
//
// Ids are "w-1", "w-2", ... (the coordinator may number new ones from its
// store instead, see CoordinatorOptions); a worker that registers again with the id it
// had keeps it, and new ids never reuse a number seen before.
//
// Thread-safety: none; the coordinator calls it under its own lock.
#ifndef YOKE_COORDINATOR_WORKER_REGISTRY_H_
#define YOKE_COORDINATOR_WORKER_REGISTRY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/yoke/v1/coordinator.pb.h"

namespace yoke::server {

struct WorkerEntry {
  std::string id;
  std::string hostname;
  std::string address;  // where its trainers listen for peers ("" if unknown)
  std::vector<v1::Device> devices;
  bool registered = false;  // false: only Expect()ed, devices unknown
  bool alive = false;
  bool draining = false;  // shutting down: gets no new attempts
  std::string reason;     // why it is not alive (or draining)
  absl::Time last_heartbeat;
  absl::Time register_time;
  absl::Time lost_time;
};

struct LostWorker {
  std::string id;
  std::string reason;  // "worker w-2 missed heartbeats for 10s"
};

class WorkerRegistry {
 public:
  // `clock` must outlive the registry.
  WorkerRegistry(const common::Clock* clock, absl::Duration heartbeat_deadline)
      : clock_(clock), deadline_(heartbeat_deadline) {}

  // Registers a worker and returns its id: `requested_id` when set (a worker
  // coming back), else a fresh one. Replaces the devices; marks it alive.
  std::string Register(const std::string& requested_id, const std::string& hostname,
                       const std::vector<v1::Device>& devices);

  // Records the address a registered worker advertised (no effect if unknown).
  void SetAddress(const std::string& id, const std::string& address);

  // Reserves `id` for a worker expected to register (see the header comment).
  // No effect if the id is already known.
  void Expect(const std::string& id);

  // Records a heartbeat. NOT_FOUND (register again) when the id is unknown,
  // only expected, or lost.
  absl::Status Heartbeat(const std::string& id);

  // Marks a worker as shutting down (its heartbeat said so): the scheduler
  // places nothing new on it. Registering again clears it.
  void SetDraining(const std::string& id);

  // Marks alive workers whose deadline passed as lost and returns them (each
  // worker once). Forgets workers lost for more than an hour.
  std::vector<LostWorker> CheckLiveness();

  // nullptr if unknown.
  const WorkerEntry* Find(const std::string& id) const;
  bool IsAlive(const std::string& id) const;
  // Every known worker, by id.
  const std::map<std::string, WorkerEntry>& workers() const { return workers_; }
  absl::Duration deadline() const { return deadline_; }

 private:
  void NoteId(const std::string& id);

  const common::Clock* clock_;
  const absl::Duration deadline_;
  std::map<std::string, WorkerEntry> workers_;
  int64_t next_number_ = 1;
};

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_WORKER_REGISTRY_H_
