// The shared-memory segment of the shm communicator (internal to
// shm_communicator.cc, whose header explains the design): its layout (a
// header of per-rank counters, then L + 1 slots), the mapping, and its
// bootstrap among the local ranks of one host.
//
// Layout: a Header (one cache line per local rank, counters that rank alone
// writes; the leader's cross-host counter; a futex word every counter store
// bumps), padded to a page, then L input slots and one result slot of
// chunk_elems f32s each.
//
// Bootstrap (MakeSegment): the leader (local index 0) creates
// "/yoke-shm-<128 random bits>" 0600 and O_EXCL with its pages reserved
// (posix_fallocate: a full /dev/shm halves the chunk, down to 1/16, before it
// is RESOURCE_EXHAUSTED), publishes "ok <name> <chunk_elems>" (or "error
// <why>", so the others fail at once with its reason) under
// "shm/<leader rank>/segment", and unlinks the name as soon as every local
// rank has mapped it (or at once on any failure), so nothing is left in
// /dev/shm even when every process is killed later. The others map it and
// check its size and header against their own settings.
//
// Thread-safety: the counters are atomics shared across processes; a
// Segment object belongs to one thread at a time.
#ifndef YOKE_COLLECTIVE_SHM_SEGMENT_H_
#define YOKE_COLLECTIVE_SHM_SEGMENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/store.h"

namespace yoke::collective::shm {

// The most local ranks a segment holds (the hierarchical path is off when a
// host has more).
constexpr int kMaxLocal = 64;

// One local rank's counters: written by that rank only, read by the others.
// Each counter holds the generation (chunk number, 1, 2, ...) the rank has
// passed that phase for.
struct alignas(64) RankLine {
  std::atomic<uint64_t> arrived;  // its input slot holds this generation's chunk
  std::atomic<uint64_t> reduced;  // its slice of the result slot is summed
  std::atomic<uint64_t> done;     // it has copied the result out: slots are free
  std::atomic<int64_t> count;     // the op's element count (ranks must agree)
  std::atomic<int64_t> seq;       // the op's sequence number
  std::atomic<int32_t> pid;
  std::atomic<int32_t> rank;     // its global rank
  std::atomic<uint64_t> pid_ns;  // its pid namespace's inode: pids compare only within one
  std::atomic<int32_t> dtype;    // the op's DataType (ranks must agree)
};

struct Header {
  uint64_t magic;
  int32_t local_size;
  int64_t chunk_elems;                           // in f32s: a slot holds chunk_elems * 4 bytes
  std::atomic<int32_t> attached;                 // local ranks that have mapped the segment
  std::atomic<int32_t> broken_by;                // 0, or 1 + the local index whose op failed
  alignas(64) std::atomic<uint64_t> cross_done;  // the leader's cross-host allreduce
  // A futex: bumped after every counter store, so that a rank asleep in
  // Await wakes as soon as a peer moves (FUTEX_WAKE only when `sleepers`).
  alignas(64) std::atomic<uint32_t> wake_word;
  std::atomic<int32_t> sleepers;
  RankLine ranks[kMaxLocal];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shm counters need lock-free atomics");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex is a plain 32-bit word");

// One spin of a busy wait: the CPU's pause hint where there is one.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

// Wakes every rank asleep on the segment's futex after a counter store.
// (seq_cst: the bump is ordered before the read of `sleepers`, and a
// sleeper's increment before its read of the word, so no wake-up is lost.)
void WakePeers(Header* h);

// Sleeps on the segment's futex for at most 2 ms, unless ready() already
// holds once this thread counts as a sleeper (so the next WakePeers wakes it
// and no wake-up is lost). For the last phase of a wait that spun and
// yielded first.
void SleepUnless(Header* h, absl::FunctionRef<bool()> ready);

// The inode of this process's pid namespace (0 if unknown).
uint64_t PidNamespace();

// False once `pid` has exited (no /proc entry, or a zombie waiting to be
// reaped, which kill(pid, 0) would still report as alive).
bool ProcessAlive(int pid);

// A mapped segment. The leader creates and unlinks it.
class Segment {
 public:
  Segment() = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  // Unlinks the name (the creator's) and unmaps, unless Leak().
  ~Segment();

  // Creates `name` for `local` ranks and slots of `chunk` f32s, and maps it.
  // RESOURCE_EXHAUSTED when /dev/shm cannot hold it; UNAVAILABLE when
  // shm_open or mmap fails.
  absl::Status Create(const std::string& name, int local, int64_t chunk);
  // Maps an existing `name`; FAILED_PRECONDITION when its size or header
  // disagree with `local` and `chunk`.
  absl::Status Open(const std::string& name, int local, int64_t chunk);

  // Removes the name (once; only the creator's).
  void Unlink();
  // Keeps the mapping when a thread we could not stop may still write to it.
  void Leak() { leak_ = true; }

  Header* header() const { return static_cast<Header*>(base_); }
  // Slot `i` (0..local-1: the inputs; local: the result).
  template <typename T>
  T* slot(int i) const {
    return reinterpret_cast<T*>(static_cast<char*>(base_) + DataOffset() +
                                static_cast<size_t>(i) * header()->chunk_elems * sizeof(float));
  }
  // Elements of T per slot.
  template <typename T>
  int64_t slot_elems() const {
    return header()->chunk_elems * static_cast<int64_t>(sizeof(float)) / sizeof(T);
  }
  const std::string& name() const { return name_; }

  // Where the slots start: the header, padded to a page.
  static constexpr size_t DataOffset() { return (sizeof(Header) + 4095) / 4096 * 4096; }

 private:
  absl::Status Map(int fd, const std::string& name);

  std::string name_;
  size_t bytes_ = 0;
  void* base_ = nullptr;
  bool owner_ = false;
  bool unlinked_ = false;
  bool leak_ = false;
};

// The segment of the host group `locals` (global ranks, ascending; at least
// 2), for local index `me`, made as above: `chunk_elems` is the leader's
// wish, `connect_timeout` bounds the wait for the record and for every
// local rank to map it. Errors are led by `where` ("shm: rank 1 of 4 (local
// 1 of 2)").
absl::StatusOr<std::unique_ptr<Segment>> MakeSegment(Store* store, const std::vector<int>& locals,
                                                     int me, int64_t chunk_elems,
                                                     absl::Duration connect_timeout,
                                                     const std::string& where);

}  // namespace yoke::collective::shm

#endif  // YOKE_COLLECTIVE_SHM_SEGMENT_H_
