// The NCCL backend: Communicators over CUDA buffers, one per local device,
// all ranks of one NCCL communicator clique. Compiled only when CUDA is
// (YOKE_WITH_NCCL); the code builds with the CUDA headers and no GPU.
//
// Bootstrap (CreateNcclCommunicators): global rank 0 makes the ncclUniqueId
// and Sets it in the Store under "nccl/id"; every process Gets it (waiting
// up to NcclOptions::init_timeout), then initialises one NCCL communicator
// per local device inside ncclGroupStart/End (ranks first_rank,
// first_rank + 1, ... in `devices` order).
//
// Execution: each op is enqueued on the communicator's own stream (created
// with cudaStreamNonBlocking on its device), followed by a completion event;
// the call returns at once. Work::Wait polls that event (so Abort and
// timeouts can interrupt it) and never synchronises the device. To order a
// collective after work on another stream without a host sync (gradient
// buckets after backward), record a cudaEvent on that stream and pass it to
// WaitForEventBeforeNextOp(): the communication stream waits on it.
//
// Ops: Allreduce (kSum, kAverage = ncclAvg) for every DataType, Broadcast,
// Allgather, Barrier (an allreduce of one float). Wire compression
// (AllreduceOptions::wire != kF32 on an f32 buffer) is not implemented on
// NCCL: UNIMPLEMENTED. NCCL cannot detect mismatched counts across ranks.
//
// Watchdog: a thread per communicator checks the in-flight ops every
// NcclOptions::watchdog_interval. An op older than its Options::timeout,
// or an asynchronous NCCL error, aborts the NCCL communicator
// (ncclCommAbort, which also unblocks its kernels) and fails the op with
// DEADLINE_EXCEEDED (or UNAVAILABLE) after the same store-based hang check
// as the Gloo backend (hang_check.h), naming the ranks that never arrived.
// Every CUDA or NCCL error becomes a Status with the call, the error text,
// file and line (engine/kernels/cuda/cuda_check.h, nccl_check.h).
//
// Thread-safety: as Communicator (communicator.h); WaitForEventBeforeNextOp
// from the owning thread only.
#ifndef YOKE_COLLECTIVE_NCCL_NCCL_COMMUNICATOR_H_
#define YOKE_COLLECTIVE_NCCL_NCCL_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/communicator.h"
#include "collective/store.h"

namespace yoke::collective {

struct NcclOptions {
  // How long ranks other than 0 wait for rank 0's ncclUniqueId.
  absl::Duration init_timeout = absl::Minutes(2);
  // How often the watchdog looks at in-flight ops.
  absl::Duration watchdog_interval = absl::Milliseconds(100);
  // After a timeout, how long the hang check waits for the other ranks.
  absl::Duration hang_grace = absl::Seconds(3);
  // One long poll of the hang listener (hang_check.h).
  absl::Duration hang_poll = absl::Seconds(10);
};

class NcclCommunicator : public Communicator {
 public:
  // The communication stream (a cudaStream_t).
  virtual void* stream() const = 0;
  // Makes the next op (only) wait on the device for `cuda_event` (a
  // cudaEvent_t that must stay valid until that op is issued) before it
  // starts. nullptr clears it.
  virtual void WaitForEventBeforeNextOp(void* cuda_event) = 0;
};

// One communicator per entry of `devices` (CUDA ordinals), global ranks
// first_rank .. first_rank + devices.size() - 1 of world_size. The store
// must outlive the communicators. INVALID_ARGUMENT for a bad world size,
// rank range or device list; UNAVAILABLE when CUDA has no usable device;
// DEADLINE_EXCEEDED when rank 0's id does not arrive; NCCL's own error
// otherwise.
absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> CreateNcclCommunicators(
    Store* store, int world_size, int first_rank, std::vector<int> devices,
    const NcclOptions& options = {});

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_NCCL_NCCL_COMMUNICATOR_H_
