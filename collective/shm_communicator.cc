// The shared-memory communicator: the transport under the op queue
// (op_queue.h). The chunked reduce-scatter / cross-host allreduce /
// all-gather through the segment, the waits on its counters, what a break
// does to the segment and the inner Gloo communicators, and the
// delegation of every other op to Gloo (shm_communicator.h explains the
// design). The segment itself is shm_segment.cc; the choice of this path,
// CreateCommunicator in communicator.cc.
#include "collective/shm_communicator.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/gloo_ops.h"
#include "collective/op_queue.h"
#include "collective/shm_segment.h"
#include "common/status.h"

namespace yoke::collective {
namespace {

using shm::Header;
using shm::PidNamespace;
using shm::ProcessAlive;
using shm::RankLine;
using shm::Segment;
using shm::WakePeers;

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

// The local group: who is where, and the op thread's state.
struct Group {
  int rank = 0;
  int size = 0;
  std::vector<int> locals;  // global ranks on this host, ascending
  int me = 0;               // index into locals
  int hosts = 1;
};

// The transport of one rank: its segment (with 2 or more local ranks), the
// inner Gloo communicator over all ranks and, on a leader with several
// hosts, the Gloo communicator of leaders; and the queue its ops run on.
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
        cross_(std::move(cross)),
        queue_(OpQueue::Create(
            g_.rank, g_.size,
            [this](const absl::Status& s, OpQueue::BreakCause cause) { OnBreak(s, cause); })) {}

  ~ShmCore() { Shutdown(); }

  // Breaks the communicator (not the local peers': they may still be
  // finishing the last op, whose bytes this rank has all written), stops
  // the op thread and closes the Gloo communicators. Idempotent; called by
  // the communicator's destructor, so that Works that outlive it neither
  // keep the thread nor the connections.
  void Shutdown() {
    if (shut_down_.exchange(true)) return;
    queue_->Break(absl::AbortedError("communicator destroyed"), OpQueue::BreakCause::kShutdown);
    queue_->Stop(absl::InfiniteDuration());  // every wait in the thread honours the break
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
  const std::shared_ptr<OpQueue>& queue() const { return queue_; }

  // Leave()'s op. The segment needs no goodbye: a rank that finished op k
  // has written everything its peers read for it. Gloo's connections do.
  absl::Status LeaveGloo(absl::Duration timeout) {
    absl::Status s = inner_->Leave(timeout);
    if (cross_ != nullptr) {
      absl::Status c = cross_->Leave(timeout);
      if (s.ok()) s = c;
    }
    return s;
  }

  // The allreduce through the segment (shm_communicator.h, steps 1-4), for
  // T = float (DataType kF32), int32_t (kI32) and int64_t (kI64).
  template <typename T>
  absl::Status AllreduceShm(const OpQueue::Op& op, T* data, int64_t count, DataType dtype,
                            ReduceOp rop, absl::Duration timeout) {
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
  std::string Where(const OpQueue::Op& op) const { return queue_->Where(op); }

  // After every break of the queue: stops this rank's waits (Await) and the
  // inner communicators' ops; an Abort() or a failed op (not a leave or
  // the destructor) marks the segment broken, so the local peers fail fast.
  void OnBreak(const absl::Status& s, OpQueue::BreakCause cause) {
    aborted_.store(true);
    const bool mark_segment =
        cause == OpQueue::BreakCause::kAbort || cause == OpQueue::BreakCause::kOpFailed;
    if (mark_segment && seg_ != nullptr) {
      int32_t expected = 0;
      seg_->header()->broken_by.compare_exchange_strong(expected, g_.me + 1);
      WakePeers(seg_->header());
    }
    inner_->Abort(s.message());
    if (cross_ != nullptr) cross_->Abort(s.message());
  }

  // Waits until there(j) for every local index j in `whom`: spins, then
  // yields, then sleeps on the segment's futex (woken by the peers' next
  // counter store, or after 2 ms to look at aborts, liveness and the
  // deadline). Fails on this communicator's break, a local peer's break, a
  // dead local peer, or the deadline.
  absl::Status Await(const OpQueue::Op& op, absl::Time deadline, const char* phase,
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
        shm::CpuRelax();
        continue;
      }
      if (aborted_.load()) return queue_->broken();
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
        shm::SleepUnless(h, all_there);
      }
    }
  }

  const Group g_;
  std::unique_ptr<Segment> seg_;
  std::unique_ptr<PrefixStore> inner_store_;
  std::unique_ptr<Communicator> inner_;
  std::unique_ptr<PrefixStore> cross_store_;
  std::unique_ptr<Communicator> cross_;  // leaders only, with several hosts
  std::atomic<bool> aborted_{false};     // set by every break, before OnBreak's aborts
  std::atomic<bool> cross_in_flight_{false};
  std::atomic<bool> shut_down_{false};
  uint64_t gen_ = 0;                // op thread only
  absl::Duration timeout_;          // the running op's; op thread only
  std::shared_ptr<OpQueue> queue_;  // last: its thread starts once everything above exists
};

class ShmCommunicator : public Communicator {
 public:
  explicit ShmCommunicator(std::unique_ptr<ShmCore> core)
      : core_(std::move(core)), queue_(core_->queue()) {}
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
    ShmCore* core = core_.get();
    return queue_->Issue("allreduce", o, "", [core, buf, o](const OpQueue::Op& op) {
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

  void Abort(absl::string_view reason) override { queue_->Abort(reason); }

  absl::Status Leave(absl::Duration timeout) override {
    ShmCore* core = core_.get();
    return queue_->Leave(timeout,
                         [core](const OpQueue::Op& op) { return core->LeaveGloo(op.timeout); });
  }

  int64_t issued_seq() const override { return queue_->issued(); }
  int64_t completed_seq() const override { return queue_->completed(); }

 private:
  // Runs the op on the inner Gloo communicator, from the op thread (so it
  // keeps its place in the order), and waits for it there.
  std::unique_ptr<Work> Delegate(const char* name, const Options& o,
                                 std::function<std::unique_ptr<Work>(Communicator*)> issue) {
    Communicator* inner = core_->inner();
    return queue_->Issue(name, o, "", [inner, issue = std::move(issue)](const OpQueue::Op&) {
      return issue(inner)->Wait();
    });
  }

  // The ops' runs point into the core: it outlives the queue's worker
  // (Shutdown joins it); Works hold only the queue.
  std::unique_ptr<ShmCore> core_;
  std::shared_ptr<OpQueue> queue_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateShmCommunicator(Store* store, int rank,
                                                                    int size,
                                                                    const ShmPlacement& place,
                                                                    const GlooOptions& gloo,
                                                                    const ShmOptions& shm) {
  if (store == nullptr) return absl::InvalidArgumentError("shm: store: required");
  if (shm.chunk_elems <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm: chunk_elems: must be > 0, got ", shm.chunk_elems));
  }
  const std::vector<int>& locals = place.locals;
  Group g;
  g.rank = rank;
  g.size = size;
  g.locals = locals;
  g.me = static_cast<int>(std::find(locals.begin(), locals.end(), rank) - locals.begin());
  g.hosts = static_cast<int>(place.leader_hosts.size());
  const int L = static_cast<int>(locals.size());
  const std::string where =
      absl::StrCat("shm: rank ", rank, " of ", size, " (local ", g.me, " of ", L, ")");

  std::unique_ptr<Segment> seg;
  if (L > 1) {
    ASSIGN_OR_RETURN(
        seg, shm::MakeSegment(store, locals, g.me, shm.chunk_elems, gloo.connect_timeout, where));
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
    cg.rank_hosts = place.leader_hosts;
    ASSIGN_OR_RETURN(cross, CreateGlooCommunicator(cross_store.get(), place.host, g.hosts, cg));
  }
  auto core = std::make_unique<ShmCore>(std::move(g), std::move(seg), std::move(inner_store),
                                        std::move(inner), std::move(cross_store), std::move(cross));
  return std::unique_ptr<Communicator>(new ShmCommunicator(std::move(core)));
}

}  // namespace yoke::collective
