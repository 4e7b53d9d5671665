#include "coordinator/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

}  // namespace

GangShape ShapeOf(const v1::JobSpec& spec) {
  GangShape s;
  const v1::DistributionSpec& d = spec.distribution();
  if (d.workers() > 0) s.workers = d.workers();
  if (d.devices_per_worker() > 0) s.devices_per_worker = d.devices_per_worker();
  if (!d.device().empty()) s.kind = d.device();
  return s;
}

ScheduleResult Schedule(std::vector<PendingJob> jobs, std::vector<WorkerCapacity> workers) {
  std::stable_sort(jobs.begin(), jobs.end(), [](const PendingJob& a, const PendingJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.create_time_ms != b.create_time_ms) return a.create_time_ms < b.create_time_ms;
    return a.id < b.id;
  });
  ScheduleResult result;
  std::map<std::string, const PendingJob*> blocked_by;  // kind -> first job that did not fit
  for (const PendingJob& job : jobs) {
    const GangShape& shape = job.shape;
    auto blocker = blocked_by.find(shape.kind);
    if (blocker != blocked_by.end()) {
      result.pending[job.id] =
          absl::StrCat(Needs(shape), "; queued behind ", blocker->second->id, " (priority ",
                       blocker->second->priority, "), which starts first");
      continue;
    }
    std::vector<size_t> chosen = PickWorkers(shape, workers);
    if (chosen.empty()) {
      result.pending[job.id] =
          absl::StrCat(Needs(shape), "; free: ", DescribeFree(workers, shape.kind, false));
      // A job bigger than the alive fleet waits for workers, not for devices,
      // so it does not hold back the queue behind it.
      if (CouldEverFit(shape, workers).empty() && !workers.empty()) {
        blocked_by[shape.kind] = &job;
      }
      continue;
    }
    Placement p;
    p.job_id = job.id;
    p.world_size = shape.world_size();
    int rank = 0;
    for (size_t wi : chosen) {
      WorkerCapacity& w = workers[wi];
      std::vector<int> free = FreeDevices(w, shape.kind);
      v1::Assignment a;
      a.set_worker_id(w.id);
      a.set_first_rank(rank);
      a.set_num_replicas(shape.devices_per_worker);
      for (int i = 0; i < shape.devices_per_worker; ++i) {
        a.add_devices(free[i]);
        w.allocated[shape.kind].insert(free[i]);
      }
      rank += shape.devices_per_worker;
      p.assignments.push_back(std::move(a));
    }
    result.placed.push_back(std::move(p));
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
