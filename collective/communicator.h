// Communicator: collective operations over flat buffers among the N ranks of
// one attempt (every replica of a job is one rank, whether it is a thread in
// this process or a process on another machine).
//
// collective/ sees tensors only as (pointer, count, dtype, device); it knows
// nothing about layers or the engine's Tensor. Backends: Gloo (CPU buffers,
// TCP) in gloo_communicator.h, the shared-memory path for co-located ranks
// (CPU buffers, Gloo across hosts) in shm_communicator.h, both running their
// ops on op_queue.h, and NCCL (CUDA buffers) in nccl/nccl_communicator.h.
// CreateCommunicator (below, communicator.cc) picks Gloo or shared memory
// from where the ranks run; every CPU caller uses it.
//
// Operations are asynchronous: each call enqueues the operation and returns a
// Work handle. Operations on one Communicator run in the order they were
// issued, and every rank must issue the same operations in the same order
// (the same contract as MPI, NCCL and torch.distributed). Each operation gets
// a sequence number (1, 2, ...) in issue order; with the op's name and the
// caller's tag ("bucket 3") it identifies the op in errors and hang reports.
//
// Timeouts: every Options carries one. An op that has not completed within
// it fails with DEADLINE_EXCEEDED, and the message names the op, its sequence
// number, its tag and the ranks that never arrived, e.g.
//   "allreduce #1234 (bucket 3) timed out after 30s on rank 0 of 4:
//    ranks 2,5 never arrived"
// After a timeout or an Abort() the communicator is broken: every pending and
// later op fails with the same status. Recovery is a new attempt, with a new
// communicator.
//
// Thread-safety: a Communicator belongs to one rank and is called from one
// thread (that rank's replica thread); Work::Wait may be called from that
// thread only. Abort() may be called from any thread.
#ifndef YOKE_COLLECTIVE_COMMUNICATOR_H_
#define YOKE_COLLECTIVE_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace yoke::collective {

enum class DataType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8 };
size_t DataTypeSize(DataType t);
const char* DataTypeName(DataType t);

enum class DeviceKind : uint8_t { kCpu, kCuda };

// A flat buffer: `count` elements of `dtype` at `data` on a device.
struct Buffer {
  void* data = nullptr;
  int64_t count = 0;
  DataType dtype = DataType::kF32;
  DeviceKind device = DeviceKind::kCpu;
  int device_index = 0;  // the CUDA ordinal for kCuda

  size_t bytes() const { return static_cast<size_t>(count) * DataTypeSize(dtype); }
};

enum class ReduceOp : uint8_t {
  kSum,
  kAverage,  // the sum divided by size()
};

struct Options {
  absl::Duration timeout = absl::Minutes(5);
  // Names the op in errors and hang reports ("bucket 3"); may be empty.
  std::string tag;
};

struct AllreduceOptions : Options {
  ReduceOp op = ReduceOp::kSum;
  // kF32 buffers may travel as kF16 or kBF16 (gradient compression): the
  // buffer is converted, reduced in that type, and converted back. kF32 (the
  // default) sends the buffer's own type.
  DataType wire = DataType::kF32;
};

// A handle on an enqueued operation.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation has completed (its result is in the buffer)
  // or failed; returns its status.
  virtual absl::Status Wait() = 0;
  // Non-blocking: true once Wait() would return immediately.
  virtual bool IsCompleted() = 0;
  // The op's sequence number on its communicator.
  virtual int64_t seq() const = 0;
};

// A Work that failed before it was issued (bad arguments, a communicator
// already broken): Wait returns `status` at once. `seq` is the op's, or 0
// when it never got one.
class FailedWork final : public Work {
 public:
  explicit FailedWork(absl::Status status, int64_t seq = 0)
      : status_(std::move(status)), seq_(seq) {}
  absl::Status Wait() override { return status_; }
  bool IsCompleted() override { return true; }
  int64_t seq() const override { return seq_; }

 private:
  absl::Status status_;
  int64_t seq_;
};

struct GlooOptions;  // gloo_communicator.h
struct ShmOptions;   // shm_communicator.h
class Store;         // store.h

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo" or "nccl".
  virtual const char* backend() const = 0;

  // In place: every rank's `buf` becomes the elementwise reduction of all
  // ranks' buffers. Counts and dtypes must match across ranks.
  virtual std::unique_ptr<Work> Allreduce(Buffer buf, const AllreduceOptions& options) = 0;
  // Every rank's `buf` becomes rank `root`'s.
  virtual std::unique_ptr<Work> Broadcast(Buffer buf, int root, const Options& options) = 0;
  // `out` (size() * in.count elements) receives every rank's `in`, in rank
  // order.
  virtual std::unique_ptr<Work> Allgather(Buffer in, Buffer out, const Options& options) = 0;
  virtual std::unique_ptr<Work> Barrier(const Options& options) = 0;

  // Breaks the communicator: pending and later ops fail with ABORTED and
  // `reason`. Used by the watchdog and on shutdown; idempotent.
  virtual void Abort(absl::string_view reason) = 0;

  // Leaves the group, after this rank's last op and before the communicator
  // (or the process) goes away: waits until every op issued here has
  // finished and every other rank has called Leave() too, or has closed its
  // connections, or `timeout` has passed. Then closing this rank's
  // connections cannot cut short a peer that is still finishing the last op
  // (Gloo fails it with "Connection closed by peer" even when its bytes have
  // arrived). Not an op of the sequence: a peer still issuing ops matches
  // nothing and only keeps this rank waiting until it fails or leaves too.
  // Later ops fail with FAILED_PRECONDITION. OK once every peer left; else
  // why not (UNAVAILABLE, DEADLINE_EXCEEDED, or the broken communicator's
  // status). Backends with nothing to wait for return OK.
  virtual absl::Status Leave(absl::Duration timeout) {
    (void)timeout;
    return absl::OkStatus();
  }

  // Sequence numbers: the last op issued, and the last one completed
  // successfully (0 before the first). Safe from any thread; the trainer
  // reports them so that a hang can be attributed to the ranks behind.
  virtual int64_t issued_seq() const = 0;
  virtual int64_t completed_seq() const = 0;
};

// The host of a rank, from its GlooOptions::rank_hosts entry ("w-1@10.0.0.5"
// -> "10.0.0.5"; an entry without '@' is the host itself).
std::string RankHost(const std::string& rank_host);

// Which path CreateCommunicator takes for `rank`: empty for plain Gloo,
// else the ranks that share its host (ascending, including `rank`; just
// `rank` when it is alone on its host). Decided from the whole job's layout,
// so every rank decides alike: plain Gloo when shm is off (options or
// YOKE_SHM=0), when rank_hosts does not name every rank's address ("w-1@"
// has none), when no host has 2 or more ranks, or when one has more than 64;
// the hierarchical path otherwise, where a rank alone on its host is that
// host's leader and needs no segment.
std::vector<int> LocalRanks(int rank, int size, const GlooOptions& gloo, const ShmOptions& shm);

// The communicator for rank `rank` of `size`: the shared-memory one
// (CreateShmCommunicator) when LocalRanks() finds co-located ranks, else
// CreateGlooCommunicator. Logs which path it takes ("rank 1: allreduce: shm
// for 2 local ranks, gloo across 1 host(s)"). Every rank of the job must call
// it (with the same rank_hosts and shm settings), and `store` must be a
// fresh namespace per attempt, as for CreateGlooCommunicator. Without `shm`,
// ShmOptions' defaults.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(Store* store, int rank, int size,
                                                                 const GlooOptions& gloo,
                                                                 const ShmOptions& shm);
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(Store* store, int rank, int size,
                                                                 const GlooOptions& gloo);

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_COMMUNICATOR_H_
