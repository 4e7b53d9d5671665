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
//   - Order: priority descending; then fair share: the jobs of submitters
//     that hold fewer devices now (SchedulePolicy::running_devices, as the
//     pass starts) first, then of those that used fewer device-seconds
//     lately (SchedulePolicy::usage); then FIFO (create time, then id). A
//     submitter with many jobs, running or just ended, thus cannot keep
//     others waiting behind its queue, and none starves: its counts fall as
//     its jobs end and its usage decays.
//   - Backfill without starvation: the first job of kind K that cannot start
//     holds devices for itself. It picks the workers it will start on (those
//     with the most free devices of K, ties by id) and holds their free
//     devices, up to what it needs on each. Later jobs of kind K start
//     only on devices nobody holds. The held set never shrinks while the job
//     waits (held devices go to nobody else, and devices only free up), so it
//     starts as soon as the jobs already running on its workers end: smaller
//     jobs that fit around it start now, and none of them can delay it. Only
//     the first blocked job of a kind holds devices; the next one does when it
//     comes first. A job larger than the whole alive fleet of its kind (it
//     waits for more workers, not for devices) holds nothing.
//   - Per-submitter cap (SchedulePolicy): a job whose submitter already runs
//     so many devices that this job would pass the cap waits, holding
//     nothing, so it cannot block other submitters' jobs.
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
  // A parameter-server job's PS tasks (distribution.parameter_servers): ranks
  // of their own that take no device, placed in the workers' shares
  // (jobspec/ps_check.h).
  int ps_tasks = 0;
  int devices() const { return workers * devices_per_worker; }
  int ranks() const { return devices() + ps_tasks; }
};
GangShape ShapeOf(const v1::JobSpec& spec);
// The devices an attempt's shares hold (its ranks may be more: PS tasks).
int64_t AttemptDevices(const v1::Attempt& a);

struct PendingJob {
  std::string id;
  GangShape shape;
  int32_t priority = 0;
  int64_t create_time_ms = 0;
  std::string owner;  // the submitter ("" unauthenticated)
};

// Limits across jobs, from the coordinator's config.
struct SchedulePolicy {
  // Devices one submitter's placed jobs may hold together; 0: no limit.
  int64_t max_running_devices_per_submitter = 0;
  // Devices each submitter's placed (scheduled or running) jobs hold now,
  // with those of its stopped trainers that have not exited yet: the cap's
  // count and the fair-share order.
  std::map<std::string, int64_t> running_devices;
  // Device-seconds each submitter's attempts used lately, running ones
  // included, decayed by the coordinator: the fair-share order's second key.
  std::map<std::string, double> usage;
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
ScheduleResult Schedule(std::vector<PendingJob> jobs, std::vector<WorkerCapacity> workers,
                        const SchedulePolicy& policy = {});

// "submitter 'alice'", or "the unauthenticated submitter" for "".
std::string SubmitterName(const std::string& owner);

// OK when some set of `workers` (all free) could hold the job; otherwise a
// message for FAILED_PRECONDITION ("needs 2 workers with 4 cuda devices each;
// the largest registered workers have: w-1: 0 cuda, ..."). With no workers
// at all the job is accepted: a fleet may still be starting up.
// Returns "" when it fits.
std::string CouldEverFit(const GangShape& shape, const std::vector<WorkerCapacity>& workers);

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_SCHEDULER_H_
