#include "coordinator/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/quote.h"
#include "jobspec/ps_check.h"

namespace yoke::server {
namespace {

std::string Plural(int n, const std::string& noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

std::string Needs(const GangShape& s) {
  return absl::StrCat("needs ", Plural(s.workers, "worker"), " with ", s.devices_per_worker, " ",
                      s.kind, " device", s.devices_per_worker == 1 ? "" : "s",
                      s.workers == 1 ? "" : " each");
}

// Free local indices of `kind` on `w`, in increasing order.
std::vector<int> FreeDevices(const WorkerCapacity& w, const std::string& kind) {
  std::vector<int> free;
  auto taken = w.allocated.find(kind);
  for (const v1::Device& d : w.devices) {
    if (d.kind() != kind) continue;
    if (taken != w.allocated.end() && taken->second.count(d.index())) continue;
    free.push_back(d.index());
  }
  std::sort(free.begin(), free.end());
  return free;
}

int TotalDevices(const WorkerCapacity& w, const std::string& kind) {
  int n = 0;
  for (const v1::Device& d : w.devices) n += d.kind() == kind;
  return n;
}

// "free: 2 workers (w-1: 1 cpu, w-3: 2 cpu)", listing at most 5 workers.
std::string DescribeFree(const std::vector<WorkerCapacity>& workers, const std::string& kind,
                         bool total) {
  std::vector<std::pair<int, std::string>> with;
  for (const WorkerCapacity& w : workers) {
    const int n = total ? TotalDevices(w, kind) : static_cast<int>(FreeDevices(w, kind).size());
    if (n > 0) with.push_back({n, w.id});
  }
  std::sort(with.begin(), with.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (with.empty()) return absl::StrCat("no worker has ", total ? "" : "a free ", kind, " device");
  std::vector<std::string> parts;
  for (size_t i = 0; i < with.size() && i < 5; ++i) {
    parts.push_back(absl::StrCat(with[i].second, ": ", with[i].first, " ", kind));
  }
  if (with.size() > 5) parts.push_back(absl::StrCat("and ", with.size() - 5, " more"));
  return absl::StrCat(Plural(static_cast<int>(with.size()), "worker"), " (",
                      absl::StrJoin(parts, ", "), ")");
}

// Picks `shape.workers` workers with enough free devices; empty if none.
std::vector<size_t> PickWorkers(const GangShape& shape,
                                const std::vector<WorkerCapacity>& workers) {
  std::vector<std::pair<int, size_t>> fit;  // (free count, index)
  for (size_t i = 0; i < workers.size(); ++i) {
    const int free = static_cast<int>(FreeDevices(workers[i], shape.kind).size());
    if (free >= shape.devices_per_worker) fit.push_back({free, i});
  }
  if (static_cast<int>(fit.size()) < shape.workers) return {};
  std::sort(fit.begin(), fit.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : workers[a.second].id < workers[b.second].id;
  });
  std::vector<size_t> chosen;
  for (int i = 0; i < shape.workers; ++i) chosen.push_back(fit[i].second);
  std::sort(chosen.begin(), chosen.end(),
            [&](size_t a, size_t b) { return workers[a].id < workers[b].id; });
  return chosen;
}

// Devices a job that cannot start yet holds, so later jobs cannot delay it.
struct Hold {
  const PendingJob* job = nullptr;
  std::vector<std::string> held;  // "w-1: 2 cpu" for each worker where it holds some
  int devices = 0;                // free devices held, on all of them
};

// Picks the workers `job` will start on (the most free devices of its kind
// first, ties by id, among those big enough) and marks their free devices,
// up to what it needs on each, as taken. The job must fit the fleet.
Hold HoldFor(const PendingJob& job, std::vector<WorkerCapacity>& workers) {
  const GangShape& shape = job.shape;
  std::vector<std::pair<int, size_t>> big;  // (free count, index)
  for (size_t i = 0; i < workers.size(); ++i) {
    if (TotalDevices(workers[i], shape.kind) < shape.devices_per_worker) continue;
    big.push_back({static_cast<int>(FreeDevices(workers[i], shape.kind).size()), i});
  }
  std::sort(big.begin(), big.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : workers[a.second].id < workers[b.second].id;
  });
  Hold h;
  h.job = &job;
  for (size_t k = 0; k < big.size() && static_cast<int>(k) < shape.workers; ++k) {
    WorkerCapacity& w = workers[big[k].second];
    std::vector<int> free = FreeDevices(w, shape.kind);
    const int take = std::min<int>(static_cast<int>(free.size()), shape.devices_per_worker);
    for (int i = 0; i < take; ++i) w.allocated[shape.kind].insert(free[i]);
    h.devices += take;
    if (take > 0) h.held.push_back(absl::StrCat(w.id, ": ", take, " ", shape.kind));
  }
  std::sort(h.held.begin(), h.held.end());
  return h;
}

// Gives `job` the lowest free devices on each chosen worker, ranks
// contiguous per worker in id order.
Placement Place(const PendingJob& job, const std::vector<size_t>& chosen,
                std::vector<WorkerCapacity>& workers) {
  const GangShape& shape = job.shape;
  Placement p;
  p.job_id = job.id;
  p.world_size = shape.ranks();
  const std::vector<common::PsShare> shares =
      common::PsShares(static_cast<int>(chosen.size()), shape.devices_per_worker, shape.ps_tasks);
  for (size_t i = 0; i < chosen.size(); ++i) {
    WorkerCapacity& w = workers[chosen[i]];
    std::vector<int> free = FreeDevices(w, shape.kind);
    v1::Assignment a;
    a.set_worker_id(w.id);
    a.set_first_rank(shares[i].first_rank);
    a.set_num_replicas(shares[i].num_ranks);
    for (int d = 0; d < shape.devices_per_worker; ++d) {
      a.add_devices(free[d]);
      w.allocated[shape.kind].insert(free[d]);
    }
    p.assignments.push_back(std::move(a));
  }
  return p;
}

}  // namespace

GangShape ShapeOf(const v1::JobSpec& spec) {
  GangShape s;
  const v1::DistributionSpec& d = spec.distribution();
  if (d.workers() > 0) s.workers = d.workers();
  if (d.devices_per_worker() > 0) s.devices_per_worker = d.devices_per_worker();
  if (!d.device().empty()) s.kind = d.device();
  s.ps_tasks = common::ParameterServerTasks(spec);
  return s;
}

int64_t AttemptDevices(const v1::Attempt& a) {
  int64_t n = 0;
  for (const v1::Assignment& s : a.assignments()) n += s.devices_size();
  return n;
}

std::string SubmitterName(const std::string& owner) {
  return owner.empty() ? std::string("the unauthenticated submitter")
                       : absl::StrCat("submitter ", common::Quote(owner));
}

ScheduleResult Schedule(std::vector<PendingJob> jobs, std::vector<WorkerCapacity> workers,
                        const SchedulePolicy& policy) {
  const auto held = [&](const std::string& owner) {
    auto it = policy.running_devices.find(owner);
    return it == policy.running_devices.end() ? int64_t{0} : it->second;
  };
  const auto used = [&](const std::string& owner) {
    auto it = policy.usage.find(owner);
    return it == policy.usage.end() ? 0.0 : it->second;
  };
  std::stable_sort(jobs.begin(), jobs.end(), [&](const PendingJob& a, const PendingJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (held(a.owner) != held(b.owner)) return held(a.owner) < held(b.owner);
    if (used(a.owner) != used(b.owner)) return used(a.owner) < used(b.owner);
    if (a.create_time_ms != b.create_time_ms) return a.create_time_ms < b.create_time_ms;
    return a.id < b.id;
  });
  ScheduleResult result;
  std::map<std::string, Hold> holds;  // kind -> the first job of that kind that did not fit
  std::map<std::string, int64_t> running = policy.running_devices;
  const int64_t cap = policy.max_running_devices_per_submitter;
  for (const PendingJob& job : jobs) {
    const GangShape& shape = job.shape;
    if (cap > 0 && running[job.owner] + shape.devices() > cap) {
      result.pending[job.id] = absl::StrCat(
          Needs(shape), "; held back: ", SubmitterName(job.owner), " runs ",
          Plural(static_cast<int>(running[job.owner]), "device"), ", and ", shape.devices(),
          " more would pass max_running_devices_per_submitter (", cap, ")");
      continue;
    }
    std::vector<size_t> chosen = PickWorkers(shape, workers);
    if (chosen.empty()) {
      std::string reason =
          absl::StrCat(Needs(shape), "; free: ", DescribeFree(workers, shape.kind, false));
      auto hold = holds.find(shape.kind);
      if (hold != holds.end()) {
        if (hold->second.devices > 0) {
          absl::StrAppend(&reason, "; ", hold->second.devices, " more are held for ",
                          hold->second.job->id, " (priority ", hold->second.job->priority,
                          "), which starts first");
        }
      } else if (CouldEverFit(shape, workers).empty() && !workers.empty()) {
        // A job bigger than the alive fleet waits for workers, not for
        // devices, so it holds nothing.
        Hold h = HoldFor(job, workers);
        if (h.devices > 0) {
          absl::StrAppend(&reason,
                          "; held for it until the rest free up: ", absl::StrJoin(h.held, ", "));
        }
        holds[shape.kind] = std::move(h);
      }
      result.pending[job.id] = std::move(reason);
      continue;
    }
    running[job.owner] += shape.devices();
    result.placed.push_back(Place(job, chosen, workers));
  }
  return result;
}

std::string CouldEverFit(const GangShape& shape, const std::vector<WorkerCapacity>& workers) {
  if (workers.empty()) return "";
  int big_enough = 0;
  for (const WorkerCapacity& w : workers) {
    big_enough += TotalDevices(w, shape.kind) >= shape.devices_per_worker;
  }
  if (big_enough >= shape.workers) return "";
  return absl::StrCat(Needs(shape),
                      "; registered: ", DescribeFree(workers, shape.kind, /*total=*/true));
}

}  // namespace yoke::server
