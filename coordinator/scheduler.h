// Gang scheduler: decides which pending jobs start now and where.
//
// Pure functions over plain inputs (no clocks, no I/O, no locks), so every
// rule is unit-testable. The coordinator calls Schedule() with the pending
// jobs and the alive workers' free devices and records each placement as a
// new attempt.
//
// Rules:
//   - Gang: a job needs `workers` workers, each with `devices_per_worker` free
//     devices of its kind ("cpu" or "cuda"); it starts with all of them or not
//     at all.
//   - Order: priority descending, then FIFO (create time, then id).
//   - No starvation: once a job of kind K cannot start, no later job of kind
//     K starts in the same pass (no backfill), so a stream of small jobs can
//     never delay an earlier or higher-priority big one. Jobs of the other
//     kind still start: they use disjoint devices and cannot delay it. One
//     exception: a job larger than the whole alive fleet of its kind (it waits
//     for more workers, not for devices to free up) does not block others.
//   - Placement: among fitting workers, the ones with the fewest free devices
//     first (best fit, keeps big holes for big jobs), ties by worker id.
//     Ranks are contiguous per worker, workers in id order; a worker's devices
//     are its lowest free indices, in increasing order.
//
// Thread-safety: stateless functions.
#ifndef YOKE_COORDINATOR_SCHEDULER_H_
#define YOKE_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "proto/yoke/v1/coordinator.pb.h"

namespace yoke::server {

// What a job asks for, with the spec's defaults applied.
struct GangShape {
  int workers = 1;
  int devices_per_worker = 1;
  std::string kind = "cpu";
  int world_size() const { return workers * devices_per_worker; }
};
GangShape ShapeOf(const v1::JobSpec& spec);

struct PendingJob {
  std::string id;
  GangShape shape;
  int32_t priority = 0;
  int64_t create_time_ms = 0;
};

// One alive worker and the device indices (per kind) already taken.
struct WorkerCapacity {
  std::string id;
  std::vector<v1::Device> devices;
  std::map<std::string, std::set<int>> allocated;  // kind -> local indices
};

struct Placement {
  std::string job_id;
  int world_size = 0;
  std::vector<v1::Assignment> assignments;  // in rank order
};

struct ScheduleResult {
  std::vector<Placement> placed;               // in start order
  std::map<std::string, std::string> pending;  // job id -> reason
};

// Places what fits now; every job not placed gets a reason.
ScheduleResult Schedule(std::vector<PendingJob> jobs, std::vector<WorkerCapacity> workers);

// OK when some set of `workers` (all free) could hold the job; otherwise a
// message for FAILED_PRECONDITION ("needs 2 workers with 4 cuda devices each;
// the largest registered workers have: w-1: 0 cuda, ..."). With no workers
// at all the job is accepted: a fleet may still be starting up.
// Returns "" when it fits.
std::string CouldEverFit(const GangShape& shape, const std::vector<WorkerCapacity>& workers);

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_SCHEDULER_H_
