// The shared-memory communicator: bootstrap of the segment, the op thread,
// and the chunked reduce-scatter / cross-host allreduce / all-gather
// (shm_communicator.h explains the design).
#include "collective/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "collective/gloo_ops.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define YOKE_CPU_RELAX() _mm_pause()
#else
#define YOKE_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace yoke::collective {
namespace {

constexpr uint64_t kMagic = 0x31484d53454b4f59ull;  // "YOKESHM1"
constexpr int kMaxLocal = 64;
constexpr size_t kPage = 4096;

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

// Wakes every rank asleep on the segment's futex after a counter store.
// (seq_cst: the bump is ordered before the read of `sleepers`, and a
// sleeper's increment before its read of the word, so no wake-up is lost.)
void WakePeers(Header* h) {
  h->wake_word.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) > 0) {
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->wake_word), FUTEX_WAKE, INT_MAX, nullptr,
              nullptr, 0);
  }
}

size_t DataOffset() { return (sizeof(Header) + kPage - 1) / kPage * kPage; }
size_t SegmentBytes(int local, int64_t chunk) {
  return DataOffset() + static_cast<size_t>(local + 1) * chunk * sizeof(float);
}

uint64_t PidNamespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// False once `pid` has exited (no /proc entry, or a zombie waiting to be
// reaped, which kill(pid, 0) would still report as alive).
bool ProcessAlive(int pid) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat;
  if (!f || !std::getline(f, stat)) return false;
  const size_t p = stat.rfind(')');
  if (p == std::string::npos || p + 2 >= stat.size()) return true;
  const char state = stat[p + 2];
  return state != 'Z' && state != 'X';
}

std::string RandomToken() {
  unsigned char bytes[16] = {};
  std::ifstream f("/dev/urandom", std::ios::binary);
  f.read(reinterpret_cast<char*>(bytes), sizeof(bytes));
  if (!f) {
    // Unlikely; still unique enough with the pid and the clock, and O_EXCL
    // catches a collision.
    const uint64_t a = static_cast<uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull;
    const uint64_t b = static_cast<uint64_t>(absl::GetCurrentTimeNanos());
    std::memcpy(bytes, &a, 8);
    std::memcpy(bytes + 8, &b, 8);
  }
  std::string hex;
  for (unsigned char c : bytes) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  return hex;
}

// A mapped segment. The leader creates and unlinks it.
class Segment {
 public:
  ~Segment() {
    Unlink();
    if (base_ != nullptr && !leak_) ::munmap(base_, bytes_);
  }

  absl::Status Create(const std::string& name, int local, int64_t chunk) {
    name_ = name;
    bytes_ = SegmentBytes(local, chunk);
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return Errno("shm_open(O_CREAT) ", name);
    owner_ = true;
    // Reserve the pages now: tmpfs would otherwise let the mapping succeed
    // and raise SIGBUS at the first write past a full /dev/shm.
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
    if (err != 0) {
      ::close(fd);
      return absl::ResourceExhaustedError(absl::StrCat(
          "shm: cannot reserve ", bytes_, " bytes for ", name, " in /dev/shm: ", std::strerror(err),
          " (a bigger /dev/shm, or YOKE_SHM=0 for plain Gloo)"));
    }
    absl::Status s = Map(fd, name);
    if (!s.ok()) return s;
    Header* h = header();
    h->magic = kMagic;
    h->local_size = local;
    h->chunk_elems = chunk;
    return absl::OkStatus();
  }

  absl::Status Open(const std::string& name, int local, int64_t chunk) {
    name_ = name;
    bytes_ = SegmentBytes(local, chunk);
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return Errno("shm_open ", name);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes_) {
      ::close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("shm: ", name, " has ", st.st_size, " bytes, want ", bytes_,
                       ": local ranks disagree on the shm settings"));
    }
    absl::Status s = Map(fd, name);
    if (!s.ok()) return s;
    if (header()->magic != kMagic || header()->local_size != local ||
        header()->chunk_elems != chunk) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shm: ", name, " was made for ", header()->local_size, " local ranks and chunks of ",
          header()->chunk_elems, ", this rank wants ", local, " and ", chunk));
    }
    return absl::OkStatus();
  }

  void Unlink() {
    if (owner_ && !unlinked_) ::shm_unlink(name_.c_str());
    unlinked_ = true;
  }
  // Keeps the mapping when a thread we could not stop may still write to it.
  void Leak() { leak_ = true; }

  Header* header() const { return static_cast<Header*>(base_); }
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

 private:
  absl::Status Map(int fd, const std::string& name) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) return Errno("mmap ", name);
    base_ = p;
    return absl::OkStatus();
  }
  static absl::Status Errno(const char* what, const std::string& name) {
    return absl::UnavailableError(absl::StrCat("shm: ", what, name, ": ", std::strerror(errno),
                                               " (YOKE_SHM=0 turns the shared-memory path off)"));
  }

  std::string name_;
  size_t bytes_ = 0;
  void* base_ = nullptr;
  bool owner_ = false;
  bool unlinked_ = false;
  bool leak_ = false;
};

// Elements summed per block in TreeSum: its temporaries live on the stack.
constexpr int64_t kSumBlock = 1024;

// dst[k] = the sum of slots [r0, r0 + n) at elements [i, i + len), len <=
// kSumBlock, as a pairwise tree in slot order: the first p slots (p the
// largest power of two below n) plus the rest, recursively. So 2 slots give
// a0 + a1, 3 give (a0 + a1) + a2, 4 give (a0 + a1) + (a2 + a3): the same
// bits as hosts of 2 ranks each whose leaders then add their sums, which
// keeps a job on one host and the same job over two hosts identical.
template <typename T>
void TreeSum(const Segment& seg, int r0, int n, int64_t i, int64_t len, T* dst) {
  if (n == 1) {
    std::memcpy(dst, seg.slot<T>(r0) + i, len * sizeof(T));
    return;
  }
  if (n == 2) {
    const T* a = seg.slot<T>(r0) + i;
    const T* b = seg.slot<T>(r0 + 1) + i;
    for (int64_t k = 0; k < len; ++k) dst[k] = a[k] + b[k];
    return;
  }
  int p = 1;
  while (p * 2 < n) p *= 2;
  TreeSum(seg, r0, p, i, len, dst);
  T rest[kSumBlock];
  TreeSum(seg, r0 + p, n - p, i, len, rest);
  for (int64_t k = 0; k < len; ++k) dst[k] += rest[k];
}

// One enqueued op. `done` and `status` are guarded by the core's mu_.
struct ShmOp {
  int64_t seq = 0;
  std::string what;  // "allreduce #7 (bucket 3)"
  std::function<absl::Status(ShmOp&)> run;
  bool done = false;
  absl::Status status;
};

// The local group: who is where, and the op thread's state.
struct Group {
  int rank = 0;
  int size = 0;
  std::vector<int> locals;  // global ranks on this host, ascending
  int me = 0;               // index into locals
  int hosts = 1;
};

class ShmCore {
 public:
  ShmCore(Group g, std::unique_ptr<Segment> seg, std::unique_ptr<PrefixStore> inner_store,
          std::unique_ptr<Communicator> inner, std::unique_ptr<PrefixStore> cross_store,
          std::unique_ptr<Communicator> cross)
      : g_(std::move(g)),
        seg_(std::move(seg)),
        inner_store_(std::move(inner_store)),
        inner_(std::move(inner)),
        cross_store_(std::move(cross_store)),
        cross_(std::move(cross)) {
    thread_ = std::thread([this] { Loop(); });
  }

  ~ShmCore() { Shutdown(); }

  // Breaks the communicator (not the local peers': they may still be
  // finishing the last op, whose bytes this rank has all written), stops
  // the op thread and closes the Gloo communicators. Idempotent; called by
  // the communicator's destructor, so that Works that outlive it neither
  // keep the thread nor the connections.
  void Shutdown() {
    if (shut_down_.exchange(true)) return;
    BreakLocal(absl::AbortedError("communicator destroyed"), /*mark_segment=*/false);
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      work_cv_.Signal();
    }
    thread_.join();  // every wait in the thread honours the break
    if (seg_ != nullptr && cross_ != nullptr && cross_in_flight_.load()) {
      // The cross-host Gloo op may still be inside Gloo, writing into the
      // result slot after Gloo's destructor detaches its thread: keep the
      // mapping (the name is unlinked already; the pages go with the process).
      seg_->Leak();
    }
    cross_.reset();
    inner_.reset();
  }

  int rank() const { return g_.rank; }
  int size() const { return g_.size; }
  Communicator* inner() const { return inner_.get(); }
  int64_t issued() const { return issued_.load(); }
  int64_t completed() const { return completed_.load(); }

  std::shared_ptr<ShmOp> Enqueue(const char* name, const Options& o,
                                 std::function<absl::Status(ShmOp&)> run) {
    auto op = std::make_shared<ShmOp>();
    op->seq = issued_.load() + 1;
    op->what = absl::StrCat(name, " #", op->seq, o.tag.empty() ? "" : " (", o.tag,
                            o.tag.empty() ? "" : ")");
    op->run = std::move(run);
    absl::MutexLock lock(&mu_);
    queue_.push_back(op);
    work_cv_.Signal();
    issued_.store(op->seq);
    return op;
  }

  // Leave(): after every op issued, outside the sequence.
  std::shared_ptr<ShmOp> EnqueueLeave(absl::Duration timeout) {
    auto op = std::make_shared<ShmOp>();
    op->what = "leave";
    op->run = [this, timeout](ShmOp&) {
      // The segment needs no goodbye: a rank that finished op k has written
      // everything its peers read for it. Gloo's connections do.
      absl::Status s = inner_->Leave(timeout);
      if (cross_ != nullptr) {
        absl::Status c = cross_->Leave(timeout);
        if (s.ok()) s = c;
      }
      return s;
    };
    absl::MutexLock lock(&mu_);
    queue_.push_back(op);
    work_cv_.Signal();
    return op;
  }

  absl::Status Wait(ShmOp* op) {
    absl::MutexLock lock(&mu_);
    while (!op->done && broken_.ok()) done_cv_.Wait(&mu_);
    return op->done ? op->status : broken_;
  }
  bool IsDone(ShmOp* op) {
    absl::MutexLock lock(&mu_);
    return op->done || !broken_.ok();
  }

  // Breaks this communicator; with `mark_segment`, the local peers' too.
  void BreakLocal(const absl::Status& s, bool mark_segment) {
    {
      absl::MutexLock lock(&mu_);
      if (broken_.ok()) broken_ = s;
      done_cv_.SignalAll();
    }
    aborted_.store(true);
    if (mark_segment && seg_ != nullptr) {
      int32_t expected = 0;
      seg_->header()->broken_by.compare_exchange_strong(expected, g_.me + 1);
      WakePeers(seg_->header());
    }
    inner_->Abort(s.message());
    if (cross_ != nullptr) cross_->Abort(s.message());
  }

  // The allreduce through the segment (shm_communicator.h, steps 1-4), for
  // T = float (DataType kF32), int32_t (kI32) and int64_t (kI64).
  template <typename T>
  absl::Status AllreduceShm(ShmOp& op, T* data, int64_t count, DataType dtype, ReduceOp rop,
                            absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    timeout_ = timeout;
    const int L = static_cast<int>(g_.locals.size());
    if (L == 1) {
      // Alone on its host: its own leader, with nothing to share locally. It
      // sums over the leaders and divides by size() as the other hosts do.
      AllreduceOptions co;
      co.op = ReduceOp::kSum;
      co.timeout = timeout;
      co.tag = op.what;
      absl::Status s = cross_->Allreduce(Buffer{data, count, dtype}, co)->Wait();
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat(Where(op), ": across hosts: ", s.message()));
      }
      if (rop == ReduceOp::kAverage) DivideBy(Buffer{data, count, dtype}, g_.size);
      return absl::OkStatus();
    }
    const int64_t chunk = seg_->slot_elems<T>();
    Header* h = seg_->header();
    RankLine& mine = h->ranks[g_.me];
    std::vector<int> all(L), leader = {0};
    for (int j = 0; j < L; ++j) all[j] = j;
    for (int64_t off = 0; off < count; off += chunk) {
      const int64_t m = std::min(chunk, count - off);
      const uint64_t gen = ++gen_;
      // 1. The slots are free once every local rank has copied out the last
      //    generation's result.
      RETURN_IF_ERROR(Await(op, deadline, "free slots", all, [&](int j) {
        return h->ranks[j].done.load(std::memory_order_acquire) >= gen - 1;
      }));
      std::memcpy(seg_->slot<T>(g_.me), data + off, m * sizeof(T));
      mine.count.store(count, std::memory_order_relaxed);
      mine.dtype.store(static_cast<int32_t>(dtype), std::memory_order_relaxed);
      mine.seq.store(op.seq, std::memory_order_relaxed);
      mine.arrived.store(gen, std::memory_order_release);
      WakePeers(h);
      RETURN_IF_ERROR(Await(op, deadline, "arrived", all, [&](int j) {
        return h->ranks[j].arrived.load(std::memory_order_acquire) >= gen;
      }));
      for (int j = 0; j < L; ++j) {
        const int64_t c = h->ranks[j].count.load(std::memory_order_relaxed);
        const auto t = static_cast<DataType>(h->ranks[j].dtype.load(std::memory_order_relaxed));
        if (c != count || t != dtype) {
          return absl::InvalidArgumentError(absl::StrCat(
              Where(op), ": local ranks disagree: rank ", g_.locals[j], " called allreduce #",
              h->ranks[j].seq.load(), " with ", c, " ", DataTypeName(t), " elements, this rank ",
              count, " ", DataTypeName(dtype)));
        }
      }
      // 2. Reduce-scatter: this rank's slice, a pairwise tree over the
      //    local ranks in order (TreeSum).
      const int64_t lo = m * g_.me / L, hi = m * (g_.me + 1) / L;
      T* res = seg_->slot<T>(L);
      for (int64_t i = lo; i < hi; i += kSumBlock) {
        TreeSum(*seg_, 0, L, i, std::min(kSumBlock, hi - i), res + i);
      }
      mine.reduced.store(gen, std::memory_order_release);
      WakePeers(h);
      RETURN_IF_ERROR(Await(op, deadline, "reduced", all, [&](int j) {
        return h->ranks[j].reduced.load(std::memory_order_acquire) >= gen;
      }));
      // 3. Across hosts: the leader's Gloo allreduce of the local sums.
      if (g_.hosts > 1) {
        if (g_.me == 0) {
          AllreduceOptions co;
          co.op = ReduceOp::kSum;
          co.timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
          co.tag = op.what;
          cross_in_flight_.store(true);
          absl::Status s = cross_->Allreduce(Buffer{res, m, dtype}, co)->Wait();
          // A failed Wait (an abort) may return while Gloo still runs the op
          // into the result slot: then it stays "in flight" for Shutdown().
          if (s.ok()) cross_in_flight_.store(false);
          if (!s.ok()) {
            return absl::Status(s.code(), absl::StrCat(Where(op), ": across hosts: ", s.message()));
          }
          h->cross_done.store(gen, std::memory_order_release);
          WakePeers(h);
        } else {
          RETURN_IF_ERROR(Await(op, deadline, "cross-host", leader, [&](int) {
            return h->cross_done.load(std::memory_order_acquire) >= gen;
          }));
        }
      }
      // 4. All-gather.
      std::memcpy(data + off, res, m * sizeof(T));
      mine.done.store(gen, std::memory_order_release);
      WakePeers(h);
    }
    // As Gloo does: the sum divided by size() (integers truncate).
    if (rop == ReduceOp::kAverage) DivideBy(Buffer{data, count, dtype}, g_.size);
    return absl::OkStatus();
  }

 private:
  std::string Where(const ShmOp& op) const {
    return absl::StrCat(op.what, " on rank ", g_.rank, " of ", g_.size);
  }

  // Waits until there(j) for every local index j in `whom`: spins, then
  // yields, then sleeps on the segment's futex (woken by the peers' next
  // counter store, or after 2 ms to look at aborts, liveness and the
  // deadline). Fails on this communicator's break, a local peer's break, a
  // dead local peer, or the deadline.
  absl::Status Await(const ShmOp& op, absl::Time deadline, const char* phase,
                     const std::vector<int>& whom, absl::FunctionRef<bool(int)> there) {
    constexpr int kSpins = 2000, kYields = 100;
    absl::Time next_liveness = absl::InfinitePast();
    Header* h = seg_->header();
    auto all_there = [&] {
      for (int j : whom) {
        if (!there(j)) return false;
      }
      return true;
    };
    for (int iter = 0;; ++iter) {
      if (all_there()) return absl::OkStatus();
      if (iter < kSpins) {
        YOKE_CPU_RELAX();
        continue;
      }
      if (aborted_.load()) {
        absl::MutexLock lock(&mu_);
        return broken_;
      }
      if (const int b = h->broken_by.load(); b != 0 && b - 1 != g_.me) {
        return absl::AbortedError(
            absl::StrCat(Where(op), ": local rank ", g_.locals[b - 1],
                         " broke the shared-memory group (its op failed or it was aborted)"));
      }
      std::vector<int> late;
      for (int j : whom) {
        if (!there(j)) late.push_back(j);
      }
      const absl::Time now = absl::Now();
      if (now >= next_liveness) {
        next_liveness = now + absl::Milliseconds(100);
        const uint64_t ns = PidNamespace();
        for (int j : late) {
          const RankLine& r = h->ranks[j];
          if (r.pid_ns.load() == ns && !ProcessAlive(r.pid.load())) {
            return absl::UnavailableError(absl::StrCat(
                Where(op), " failed: local rank ", g_.locals[j], " (pid ", r.pid.load(),
                ") died while this rank waited for it (", phase, ", shared memory)"));
          }
        }
      }
      if (now >= deadline) {
        std::vector<int> ranks;
        for (int j : late) ranks.push_back(g_.locals[j]);
        return absl::DeadlineExceededError(absl::StrCat(
            Where(op), " timed out after ", absl::FormatDuration(timeout_), ": local ranks ",
            absl::StrJoin(ranks, ","), " never arrived (", phase, ", shared memory)"));
      }
      if (iter < kSpins + kYields) {
        sched_yield();
      } else {
        h->sleepers.fetch_add(1, std::memory_order_seq_cst);
        const uint32_t word = h->wake_word.load(std::memory_order_seq_cst);
        if (!all_there()) {
          const timespec two_ms{0, 2000000};
          ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&h->wake_word), FUTEX_WAIT, word,
                    &two_ms, nullptr, 0);
        }
        h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
      }
    }
  }

  void Loop() {
    while (true) {
      std::shared_ptr<ShmOp> op;
      {
        absl::MutexLock lock(&mu_);
        while (!stop_ && queue_.empty()) work_cv_.Wait(&mu_);
        if (queue_.empty()) break;
        op = std::move(queue_.front());
        queue_.pop_front();
        if (!broken_.ok()) {
          Finish(op.get(), broken_);
          continue;
        }
      }
      const absl::Status s = op->run(*op);
      const bool leave = op->seq == 0;
      if (s.ok() && !leave) completed_.store(op->seq);
      {
        // Finished before the break below, so that its waiter gets the
        // op's own status (a failed op keeps its diagnosis).
        absl::MutexLock lock(&mu_);
        Finish(op.get(), s);
      }
      if (!s.ok()) {
        BreakLocal(s, /*mark_segment=*/!leave);
      } else if (leave) {
        // Later ops fail at once: the peers are gone or going.
        BreakLocal(absl::FailedPreconditionError(absl::StrCat("rank ", g_.rank, " of ", g_.size,
                                                              " has left the communicator")),
                   /*mark_segment=*/false);
      }
    }
  }

  void Finish(ShmOp* op, const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    op->status = s;
    op->done = true;
    op->run = nullptr;
    done_cv_.SignalAll();
  }

  const Group g_;
  std::unique_ptr<Segment> seg_;
  std::unique_ptr<PrefixStore> inner_store_;
  std::unique_ptr<Communicator> inner_;
  std::unique_ptr<PrefixStore> cross_store_;
  std::unique_ptr<Communicator> cross_;  // leaders only, with several hosts
  std::atomic<int64_t> issued_{0};
  std::atomic<int64_t> completed_{0};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> cross_in_flight_{false};
  std::atomic<bool> shut_down_{false};
  uint64_t gen_ = 0;        // op thread only
  absl::Duration timeout_;  // the running op's; op thread only

  absl::Mutex mu_;
  absl::CondVar work_cv_;
  absl::CondVar done_cv_;
  std::deque<std::shared_ptr<ShmOp>> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once everything above exists
};

class ShmWork : public Work {
 public:
  ShmWork(std::shared_ptr<ShmCore> core, std::shared_ptr<ShmOp> op)
      : core_(std::move(core)), op_(std::move(op)) {}
  absl::Status Wait() override { return core_->Wait(op_.get()); }
  bool IsCompleted() override { return core_->IsDone(op_.get()); }
  int64_t seq() const override { return op_->seq; }

 private:
  std::shared_ptr<ShmCore> core_;
  std::shared_ptr<ShmOp> op_;
};

class ShmCommunicator : public Communicator {
 public:
  explicit ShmCommunicator(std::shared_ptr<ShmCore> core) : core_(std::move(core)) {}
  ~ShmCommunicator() override { core_->Shutdown(); }

  int rank() const override { return core_->rank(); }
  int size() const override { return core_->size(); }
  const char* backend() const override { return "gloo"; }  // shm within hosts, Gloo across

  std::unique_ptr<Work> Allreduce(Buffer buf, const AllreduceOptions& o) override {
    // Gloo's rule: a wire type other than f32 and the buffer's own asks
    // for compression.
    const bool compress = o.wire != DataType::kF32 && o.wire != buf.dtype;
    const bool shm = buf.device == DeviceKind::kCpu && !compress &&
                     (buf.dtype == DataType::kF32 || buf.dtype == DataType::kI32 ||
                      buf.dtype == DataType::kI64) &&
                     buf.count >= 0 && (buf.count == 0 || buf.data != nullptr);
    if (!shm) {
      // Other dtypes, wire compression and bad arguments: Gloo's path and
      // Gloo's checks.
      return Delegate("allreduce", o, [buf, o](Communicator* c) { return c->Allreduce(buf, o); });
    }
    if (o.timeout <= absl::ZeroDuration()) return BadTimeout("allreduce", o);
    ShmCore* core = core_.get();
    return Issue("allreduce", o, [core, buf, o](ShmOp& op) {
      if (buf.count == 0) return absl::OkStatus();
      switch (buf.dtype) {
        case DataType::kI32:
          return core->AllreduceShm(op, static_cast<int32_t*>(buf.data), buf.count, buf.dtype, o.op,
                                    o.timeout);
        case DataType::kI64:
          return core->AllreduceShm(op, static_cast<int64_t*>(buf.data), buf.count, buf.dtype, o.op,
                                    o.timeout);
        default:
          return core->AllreduceShm(op, static_cast<float*>(buf.data), buf.count, buf.dtype, o.op,
                                    o.timeout);
      }
    });
  }

  std::unique_ptr<Work> Broadcast(Buffer buf, int root, const Options& o) override {
    return Delegate("broadcast", o,
                    [buf, root, o](Communicator* c) { return c->Broadcast(buf, root, o); });
  }
  std::unique_ptr<Work> Allgather(Buffer in, Buffer out, const Options& o) override {
    return Delegate("allgather", o,
                    [in, out, o](Communicator* c) { return c->Allgather(in, out, o); });
  }
  std::unique_ptr<Work> Barrier(const Options& o) override {
    return Delegate("barrier", o, [o](Communicator* c) { return c->Barrier(o); });
  }

  void Abort(absl::string_view reason) override {
    core_->BreakLocal(absl::AbortedError(reason), /*mark_segment=*/true);
  }

  absl::Status Leave(absl::Duration timeout) override {
    if (timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("leave: timeout: must be > 0, got ", absl::FormatDuration(timeout)));
    }
    std::shared_ptr<ShmOp> op = core_->EnqueueLeave(timeout);
    return core_->Wait(op.get());
  }

  int64_t issued_seq() const override { return core_->issued(); }
  int64_t completed_seq() const override { return core_->completed(); }

 private:
  static std::unique_ptr<Work> BadTimeout(const char* name, const Options& o) {
    return std::make_unique<FailedWork>(absl::InvalidArgumentError(
        absl::StrCat(name, ": timeout: must be > 0, got ", absl::FormatDuration(o.timeout))));
  }

  std::unique_ptr<Work> Issue(const char* name, const Options& o,
                              std::function<absl::Status(ShmOp&)> run) {
    return std::make_unique<ShmWork>(core_, core_->Enqueue(name, o, std::move(run)));
  }

  // Runs the op on the inner Gloo communicator, from the op thread (so it
  // keeps its place in the order), and waits for it there.
  std::unique_ptr<Work> Delegate(const char* name, const Options& o,
                                 std::function<std::unique_ptr<Work>(Communicator*)> issue) {
    if (o.timeout <= absl::ZeroDuration()) return BadTimeout(name, o);
    Communicator* inner = core_->inner();
    return Issue(name, o,
                 [inner, issue = std::move(issue)](ShmOp&) { return issue(inner)->Wait(); });
  }

  std::shared_ptr<ShmCore> core_;
};

absl::Status ShmKeyMissing(const absl::Status& s, int leader) {
  return absl::Status(s.code(), absl::StrCat("shm: the name of the segment from local leader rank ",
                                             leader, ": ", s.message()));
}

// The host group's segment (L >= 2): the leader makes it and publishes its
// name; the others map it; the leader unlinks it once all have.
absl::StatusOr<std::unique_ptr<Segment>> MakeSegment(Store* store, const Group& g,
                                                     const GlooOptions& gloo, const ShmOptions& shm,
                                                     const std::string& where) {
  const std::vector<int>& locals = g.locals;
  const int rank = g.rank;
  const int L = static_cast<int>(locals.size());
  // The leader publishes "ok <name> <chunk_elems>", or "error <why>" so that
  // the others fail at once with its reason rather than at the timeout.
  auto seg = std::unique_ptr<Segment>();
  const std::string key = absl::StrCat("shm/", locals[0], "/segment");
  if (g.me == 0) {
    // A small /dev/shm (Docker's default is 64 MiB) gets smaller chunks, down
    // to 1/16 of the configured size, before it is an error.
    absl::Status s;
    int64_t chunk = shm.chunk_elems;
    for (int tries = 0; tries < 5; ++tries, chunk = std::max<int64_t>(1, chunk / 2)) {
      seg = std::make_unique<Segment>();  // the previous try's unlinks itself
      s = seg->Create(absl::StrCat("/yoke-shm-", RandomToken()), L, chunk);
      if (s.code() != absl::StatusCode::kResourceExhausted) break;
    }
    if (!s.ok()) {
      s = absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
      store->Set(key, absl::StrCat("error ", s.message())).IgnoreError();
      return s;
    }
    if (chunk != shm.chunk_elems) {
      spdlog::warn("{}: /dev/shm too small for chunks of {} floats; using {}", where,
                   shm.chunk_elems, chunk);
    }
    if (s = store->Set(key, absl::StrCat("ok ", seg->name(), " ", chunk)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(where, ": publishing the segment: ", s.message()));
    }
  } else {
    absl::StatusOr<std::string> v = store->Get(key, gloo.connect_timeout);
    if (!v.ok()) return ShmKeyMissing(v.status(), locals[0]);
    if (absl::StartsWith(*v, "error ")) {
      return absl::UnavailableError(absl::StrCat(where, ": local leader rank ", locals[0],
                                                 " could not make the segment: ", v->substr(6)));
    }
    std::vector<std::string> f = absl::StrSplit(*v, ' ');
    int64_t chunk = 0;
    if (f.size() != 3 || f[0] != "ok" || !absl::SimpleAtoi(f[2], &chunk) || chunk <= 0) {
      return absl::InternalError(
          absl::StrCat(where, ": bad segment record from rank ", locals[0], ": \"", *v, "\""));
    }
    seg = std::make_unique<Segment>();
    if (absl::Status s = seg->Open(f[1], L, chunk); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
    }
  }
  RankLine& line = seg->header()->ranks[g.me];
  line.pid.store(static_cast<int32_t>(::getpid()));
  line.rank.store(rank);
  line.pid_ns.store(PidNamespace());
  seg->header()->attached.fetch_add(1);
  if (g.me == 0) {
    const absl::Time deadline = absl::Now() + gloo.connect_timeout;
    while (seg->header()->attached.load() < L) {
      if (absl::Now() >= deadline) {
        std::vector<int> missing;
        for (int j = 1; j < L; ++j) {
          if (seg->header()->ranks[j].pid.load() == 0) missing.push_back(locals[j]);
        }
        return absl::DeadlineExceededError(
            absl::StrCat(where, ": local ranks ", absl::StrJoin(missing, ","), " did not map ",
                         seg->name(), " within ", absl::FormatDuration(gloo.connect_timeout)));
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    seg->Unlink();
  }
  return seg;
}

}  // namespace

std::string RankHost(const std::string& rank_host) {
  const size_t at = rank_host.find('@');
  return at == std::string::npos ? rank_host : rank_host.substr(at + 1);
}

std::vector<int> LocalRanks(int rank, int size, const GlooOptions& gloo, const ShmOptions& shm) {
  if (!shm.enabled) return {};
  if (const char* v = std::getenv("YOKE_SHM"); v != nullptr && std::string(v) == "0") return {};
  if (static_cast<int>(gloo.rank_hosts.size()) != size || rank < 0 || rank >= size) return {};
  // A rank with no address ("w-1@") could be anywhere: without every
  // rank's address no rank groups, so that all ranks decide alike.
  for (const std::string& h : gloo.rank_hosts) {
    if (RankHost(h).empty()) return {};
  }
  // Decided from the whole job's layout, identically on every rank: the
  // hierarchical path as soon as any host has 2 or more ranks (a rank alone
  // on its host is then its host's leader), plain Gloo otherwise.
  std::map<std::string, int> per_host;
  for (const std::string& h : gloo.rank_hosts) ++per_host[RankHost(h)];
  int most = 0;
  for (const auto& [h, n] : per_host) most = std::max(most, n);
  if (most < 2 || most > kMaxLocal) return {};
  const std::string host = RankHost(gloo.rank_hosts[rank]);
  std::vector<int> locals;
  for (int r = 0; r < size; ++r) {
    if (RankHost(gloo.rank_hosts[r]) == host) locals.push_back(r);
  }
  return locals;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(Store* store, int rank, int size,
                                                                 const GlooOptions& gloo,
                                                                 const ShmOptions& shm) {
  std::vector<int> locals = LocalRanks(rank, size, gloo, shm);
  if (locals.empty()) {
    const char* env = std::getenv("YOKE_SHM");
    const bool off = !shm.enabled || (env != nullptr && std::string(env) == "0");
    spdlog::info("rank {}: allreduce: gloo for all {} rank(s) ({})", rank, size,
                 off ? "shm off" : "no host has several ranks");
    return CreateGlooCommunicator(store, rank, size, gloo);
  }
  if (store == nullptr) return absl::InvalidArgumentError("shm: store: required");
  if (shm.chunk_elems <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm: chunk_elems: must be > 0, got ", shm.chunk_elems));
  }
  Group g;
  g.rank = rank;
  g.size = size;
  g.locals = locals;
  g.me = static_cast<int>(std::find(locals.begin(), locals.end(), rank) - locals.begin());
  // Hosts in order of their lowest rank; each one's leader is that rank.
  std::vector<std::string> hosts;
  std::vector<std::string> leader_hosts;
  int my_host = 0;
  for (int r = 0; r < size; ++r) {
    const std::string h = RankHost(gloo.rank_hosts[r]);
    if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) {
      hosts.push_back(h);
      leader_hosts.push_back(gloo.rank_hosts[r]);
    }
    if (r == rank)
      my_host = static_cast<int>(std::find(hosts.begin(), hosts.end(), h) - hosts.begin());
  }
  g.hosts = static_cast<int>(hosts.size());
  const int L = static_cast<int>(locals.size());
  const std::string where =
      absl::StrCat("shm: rank ", rank, " of ", size, " (local ", g.me, " of ", L, ")");

  std::unique_ptr<Segment> seg;
  if (L > 1) {
    ASSIGN_OR_RETURN(seg, MakeSegment(store, g, gloo, shm, where));
  }

  // Gloo: every rank, for the ops the segment does not carry; the leaders,
  // across hosts.
  auto inner_store = std::make_unique<PrefixStore>(store, "all/");
  ASSIGN_OR_RETURN(auto inner, CreateGlooCommunicator(inner_store.get(), rank, size, gloo));
  std::unique_ptr<PrefixStore> cross_store;
  std::unique_ptr<Communicator> cross;
  if (g.hosts > 1 && g.me == 0) {
    cross_store = std::make_unique<PrefixStore>(store, "leaders/");
    GlooOptions cg = gloo;
    cg.rank_hosts = leader_hosts;
    ASSIGN_OR_RETURN(cross, CreateGlooCommunicator(cross_store.get(), my_host, g.hosts, cg));
  }
  if (L > 1) {
    spdlog::info("rank {}: allreduce: shm for {} local ranks, gloo across {} host(s)", rank, L,
                 g.hosts);
  } else {
    spdlog::info("rank {}: allreduce: alone on its host (no shm), gloo across {} host(s)", rank,
                 g.hosts);
  }
  auto core = std::make_shared<ShmCore>(std::move(g), std::move(seg), std::move(inner_store),
                                        std::move(inner), std::move(cross_store), std::move(cross));
  return std::unique_ptr<Communicator>(new ShmCommunicator(std::move(core)));
}

}  // namespace yoke::collective
