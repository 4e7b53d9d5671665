// The worker's memory limit (--memory-limit) and the memory cgroups that
// hold each trainer to its share of it.
//
// The worker's own cgroup (from /proc/self/cgroup) in the hierarchy that has
// the memory controller gets one child per trainer, named
// yoke-trainer-<worker pid>-<n>, with the trainer's limit; the trainer joins
// it before it execs (worker/trainer_launcher.h), so everything it allocates
// or starts is charged there, and the kernel's OOM killer ends it alone when
// it passes the limit. The cgroup is removed when the trainer is reaped.
//
// cgroup v2 is used when the unified hierarchy has the memory controller:
// memory.max (and memory.swap.max 0 where it exists), memory.events'
// oom_kill counter, memory.peak. A cgroup v2 may not both hold processes and
// give its children a controller, so when "+memory" cannot be written to the
// worker's cgroup.subtree_control for that reason (EBUSY), the worker moves
// itself into a leaf child, yoke-worker, and tries again. Otherwise the
// cgroup v1 memory controller is used: memory.limit_in_bytes (and
// memory.memsw.limit_in_bytes where it exists), memory.oom_control's oom_kill
// counter (with memory.failcnt on kernels before 4.13, which lack it),
// memory.max_usage_in_bytes.
//
// Thread-safety: a MemoryCgroups may be shared by threads once opened;
// a TrainerCgroup is used by one thread at a time.
#ifndef YOKE_WORKER_MEMORY_CGROUP_H_
#define YOKE_WORKER_MEMORY_CGROUP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace yoke::worker {

// The memory this process may use: the machine's physical memory, or the
// limit of its own memory cgroup (v2 or v1, as /proc/self/cgroup names it)
// when that is lower. 0 if neither can be read.
int64_t VisibleMemoryBytes();

// The default --memory-limit for `visible` bytes: a reserve of a tenth, at
// least 512 MiB and at most 4 GiB, is kept for the worker and the system,
// but never more than half of `visible`.
int64_t DefaultMemoryLimit(int64_t visible);

// One replica's share of `limit`: the limit over the worker's replicas (its
// CPU replicas and GPUs), or all of it with none.
int64_t ReplicaShare(int64_t limit, int replicas);

enum class CgroupVersion { kV1, kV2 };

// The worker's own cgroup in the hierarchy with the memory controller.
struct CgroupLocation {
  CgroupVersion version = CgroupVersion::kV2;
  std::string mount;  // the hierarchy's mount point, e.g. /sys/fs/cgroup/memory
  std::string dir;    // the process's cgroup in it: MOUNT/user.slice/worker
};

// Finds the worker's memory cgroup from the text of /proc/self/mountinfo and
// /proc/self/cgroup: v2 when a cgroup2 mount's cgroup.controllers (for the
// process's own cgroup) lists memory, else the v1 mount with the memory
// option. NOT_FOUND saying what is missing otherwise.
absl::StatusOr<CgroupLocation> LocateMemoryCgroup(const std::string& mountinfo,
                                                  const std::string& proc_self_cgroup);

// What the kernel says about one trainer's cgroup; -1 where its files do not
// say.
struct CgroupMemoryStats {
  int64_t limit_bytes = -1;  // memory.max, memory.limit_in_bytes
  int64_t peak_bytes = -1;   // memory.peak, memory.max_usage_in_bytes
  int64_t limit_hits = -1;   // memory.events' max, memory.failcnt
  int64_t oom_kills = -1;    // the oom_kill counter
};

// Whether a trainer whose cgroup ends with `stats` was ended by the cgroup's
// OOM killer: its oom_kill counter moved, or, where there is no counter, it
// was killed with SIGKILL (`sigkill`) after its usage reached the limit.
bool KilledForMemory(const CgroupMemoryStats& stats, bool sigkill);

class TrainerCgroup;

class MemoryCgroups {
 public:
  // The worker's memory cgroup (LocateMemoryCgroup on this process's files),
  // checked by making and removing a child with a limit. An error says why
  // it cannot be used ("not root", a read-only mount, no controller).
  // Removes the empty trainer cgroups a worker that is gone left behind
  // (yoke-trainer-<pid>-<n> whose <pid> no longer runs: a SIGKILLed worker
  // cannot remove its own); one that still holds processes (a trainer that
  // outlived its worker) is left alone.
  static absl::StatusOr<std::unique_ptr<MemoryCgroups>> Open();
  // The same at a known location (tests).
  static absl::StatusOr<std::unique_ptr<MemoryCgroups>> OpenAt(CgroupLocation where);

  CgroupVersion version() const { return where_.version; }
  // The worker's cgroup, parent of the trainers' ones.
  const std::string& dir() const { return where_.dir; }
  // "cgroup v1 memory controller at DIR".
  std::string Describe() const;
  // How many stale trainer cgroups opening removed.
  int stale_removed() const { return stale_removed_; }

  // A new child cgroup limited to `limit_bytes` (> 0). FAILED_PRECONDITION
  // naming the file when it cannot be made or limited (nothing is left).
  absl::StatusOr<std::unique_ptr<TrainerCgroup>> Create(int64_t limit_bytes);

 private:
  explicit MemoryCgroups(CgroupLocation where) : where_(std::move(where)) {}
  absl::Status EnableV2Controller();
  void RemoveStale();

  CgroupLocation where_;
  std::atomic<int64_t> next_{0};
  int stale_removed_ = 0;
};

class TrainerCgroup {
 public:
  ~TrainerCgroup();  // Remove()
  TrainerCgroup(const TrainerCgroup&) = delete;
  TrainerCgroup& operator=(const TrainerCgroup&) = delete;

  const std::string& dir() const { return dir_; }
  // The limit asked for.
  int64_t limit_bytes() const { return limit_bytes_; }
  // Its cgroup.procs, open for writing and close-on-exec: a forked child
  // writes its pid here to join (async-signal-safe). -1 once removed.
  int procs_fd() const { return procs_fd_; }

  CgroupMemoryStats Stats() const;

  // SIGKILLs whatever still runs in it, then removes it, trying for up to
  // about a second while the kernel lets the processes go. Returns false
  // (and logs) if it is still there. Idempotent.
  bool Remove();

 private:
  friend class MemoryCgroups;
  TrainerCgroup(CgroupVersion version, std::string dir, int64_t limit_bytes, int procs_fd)
      : version_(version), dir_(std::move(dir)), limit_bytes_(limit_bytes), procs_fd_(procs_fd) {}

  CgroupVersion version_;
  std::string dir_;
  int64_t limit_bytes_;
  int procs_fd_;
  bool removed_ = false;
};

}  // namespace yoke::worker

#endif  // YOKE_WORKER_MEMORY_CGROUP_H_
