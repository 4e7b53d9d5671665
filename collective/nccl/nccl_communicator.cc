#include "collective/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "collective/hang_check.h"
#include "collective/nccl/nccl_check.h"
#include "common/status.h"
#include "engine/kernels/cuda/cuda_check.h"  // header-only: CUDA_RETURN_IF_ERROR
#include "spdlog/spdlog.h"

namespace yoke::collective {
namespace {

constexpr char kIdKey[] = "nccl/id";
constexpr int kRecentOps = 64;

ncclDataType_t NcclType(DataType t) {
  switch (t) {
    case DataType::kF32:
      return ncclFloat32;
    case DataType::kF16:
      return ncclFloat16;
    case DataType::kBF16:
      return ncclBfloat16;
    case DataType::kI32:
      return ncclInt32;
    case DataType::kI64:
      return ncclInt64;
    case DataType::kU8:
      return ncclUint8;
  }
  return ncclFloat32;
}

// One issued op. `finished` and `status` are guarded by the comm's mu_.
struct NcclOp {
  int64_t seq = 0;
  std::string what;       // "allreduce #7 (bucket 3)"
  std::string signature;  // "allreduce 1000 f32 sum"
  absl::Duration timeout;
  absl::Time deadline;
  cudaEvent_t done = nullptr;  // recorded after the op on the comm's stream
  bool finished = false;
  absl::Status status;
};

class NcclComm;

class NcclWork : public Work {
 public:
  NcclWork(NcclComm* comm, std::shared_ptr<NcclOp> op) : comm_(comm), op_(std::move(op)) {}
  absl::Status Wait() override;
  bool IsCompleted() override;
  int64_t seq() const override { return op_->seq; }

 private:
  NcclComm* comm_;  // outlives its Work (Works are waited on before the comm goes)
  std::shared_ptr<NcclOp> op_;
};

class NcclComm : public NcclCommunicator {
 public:
  NcclComm(Store* store, int rank, int size, int device, ncclComm_t comm, cudaStream_t stream,
           float* scratch, const NcclOptions& options)
      : store_(store),
        rank_(rank),
        size_(size),
        device_(device),
        options_(options),
        stream_(stream),
        scratch_(scratch),
        comm_(comm) {
    watchdog_ = std::thread([this] { Watch(); });
    listener_ = std::make_unique<HangListener>(
        store_, rank_, options_.hang_poll,
        [this](int64_t seq) {
          absl::MutexLock lock(&mu_);
          const auto& [s, sig] = recent_[seq % kRecentOps];
          return SeqState{issued_.load(), completed_.load(), s == seq ? sig : ""};
        },
        [this](const HangRequest& r) {
          const std::string mine = [&] {
            absl::MutexLock lock(&mu_);
            const auto& [s, sig] = recent_[r.seq % kRecentOps];
            return s == r.seq ? sig : std::string();
          }();
          absl::MutexLock lock(&mu_);
          BreakLocked(PeerFailureStatus(r, rank_, size_, mine));
        });
  }

  ~NcclComm() override {
    stop_.Notify();
    watchdog_.join();
    listener_.reset();
    absl::MutexLock lock(&mu_);
    if (comm_ != nullptr) {
      // Destroy waits for the comm's ops; an op still running (a peer gone)
      // would block it, so abort instead.
      bool idle = true;
      for (const auto& op : inflight_) idle = idle && cudaEventQuery(op->done) == cudaSuccess;
      if (idle) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    for (const auto& op : inflight_) cudaEventDestroy(op->done);
    cudaSetDevice(device_);
    cudaStreamDestroy(stream_);
    cudaFree(scratch_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  void* stream() const override { return stream_; }
  void WaitForEventBeforeNextOp(void* cuda_event) override {
    wait_event_ = static_cast<cudaEvent_t>(cuda_event);
  }

  std::unique_ptr<Work> Allreduce(Buffer buf, const AllreduceOptions& o) override {
    if (o.wire != DataType::kF32 && o.wire != buf.dtype) {
      return std::make_unique<FailedWork>(
          absl::UnimplementedError(absl::StrCat("allreduce: wire ", DataTypeName(o.wire),
                                                ": wire compression is not implemented on nccl")),
          0);
    }
    if (absl::Status s = CheckBuffer("allreduce", "buf", buf); !s.ok()) {
      return std::make_unique<FailedWork>(s, 0);
    }
    const ncclRedOp_t red = o.op == ReduceOp::kAverage ? ncclAvg : ncclSum;
    return Issue("allreduce", o,
                 absl::StrCat("allreduce ", buf.count, " ", DataTypeName(buf.dtype),
                              o.op == ReduceOp::kSum ? " sum" : " average"),
                 [buf, red](ncclComm_t c, cudaStream_t s) {
                   return ncclAllReduce(buf.data, buf.data, buf.count, NcclType(buf.dtype), red, c,
                                        s);
                 });
  }

  std::unique_ptr<Work> Broadcast(Buffer buf, int root, const Options& o) override {
    absl::Status s = CheckBuffer("broadcast", "buf", buf);
    if (s.ok() && (root < 0 || root >= size_)) {
      s = absl::InvalidArgumentError(
          absl::StrCat("broadcast: root: must be in [0, ", size_, "), got ", root));
    }
    if (!s.ok()) return std::make_unique<FailedWork>(s, 0);
    return Issue(
        "broadcast", o,
        absl::StrCat("broadcast ", buf.count, " ", DataTypeName(buf.dtype), " root ", root),
        [buf, root](ncclComm_t c, cudaStream_t s) {
          return ncclBroadcast(buf.data, buf.data, buf.count, NcclType(buf.dtype), root, c, s);
        });
  }

  std::unique_ptr<Work> Allgather(Buffer in, Buffer out, const Options& o) override {
    absl::Status s = CheckBuffer("allgather", "in", in);
    if (s.ok()) s = CheckBuffer("allgather", "out", out);
    if (s.ok() && (in.dtype != out.dtype || out.count != in.count * size_)) {
      s = absl::InvalidArgumentError(absl::StrCat(
          "allgather: out: must hold size() * in.count = ", size_, " * ", in.count, " ",
          DataTypeName(in.dtype), " elements, got ", out.count, " ", DataTypeName(out.dtype)));
    }
    if (!s.ok()) return std::make_unique<FailedWork>(s, 0);
    return Issue("allgather", o, absl::StrCat("allgather ", in.count, " ", DataTypeName(in.dtype)),
                 [in, out](ncclComm_t c, cudaStream_t s) {
                   return ncclAllGather(in.data, out.data, in.count, NcclType(in.dtype), c, s);
                 });
  }

  std::unique_ptr<Work> Barrier(const Options& o) override {
    float* scratch = scratch_;
    return Issue("barrier", o, "barrier", [scratch](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, c, s);
    });
  }

  void Abort(absl::string_view reason) override {
    absl::MutexLock lock(&mu_);
    BreakLocked(absl::AbortedError(reason));
  }
  int64_t issued_seq() const override { return issued_.load(); }
  int64_t completed_seq() const override { return completed_.load(); }

  // Work::Wait: polls the op's event until it fires, the op fails or the
  // communicator breaks. Spins briefly (small ops finish in microseconds),
  // then sleeps between polls.
  absl::Status WaitOp(NcclOp* op) {
    for (int i = 0;; ++i) {
      if (std::optional<absl::Status> s = Poll(op)) return *s;
      if (i < 1000) {
        std::this_thread::yield();
      } else {
        absl::SleepFor(absl::Microseconds(50));
      }
    }
  }

  bool IsDone(NcclOp* op) { return Poll(op).has_value(); }

 private:
  absl::Status CheckBuffer(const char* op, const char* arg, const Buffer& b) const {
    if (b.device != DeviceKind::kCuda || b.device_index != device_) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ", arg, ".device: this nccl communicator takes CUDA:", device_, " buffers, got ",
          b.device == DeviceKind::kCpu ? std::string("CPU")
                                       : absl::StrCat("CUDA:", b.device_index)));
    }
    if (b.count < 0 || (b.count > 0 && b.data == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", arg, ": count must be >= 0 with non-null data, got ", b.count));
    }
    return absl::OkStatus();
  }

  template <typename Call>
  std::unique_ptr<Work> Issue(const char* name, const Options& o, std::string signature,
                              Call call) {
    if (o.timeout <= absl::ZeroDuration()) {
      return std::make_unique<FailedWork>(
          absl::InvalidArgumentError(
              absl::StrCat(name, ": timeout: must be > 0, got ", absl::FormatDuration(o.timeout))),
          0);
    }
    auto op = std::make_shared<NcclOp>();
    op->seq = issued_.load() + 1;
    op->what = absl::StrCat(name, " #", op->seq, o.tag.empty() ? "" : " (", o.tag,
                            o.tag.empty() ? "" : ")");
    op->signature = std::move(signature);
    op->timeout = o.timeout;
    absl::MutexLock lock(&mu_);
    recent_[op->seq % kRecentOps] = {op->seq, op->signature};
    issued_.store(op->seq);
    if (!broken_.ok()) return std::make_unique<FailedWork>(broken_, op->seq);
    absl::Status s = Enqueue(op.get(), call);
    if (!s.ok()) {
      BreakLocked(common::Annotate(s, absl::StrCat(op->what, " on rank ", rank_, " of ", size_)));
      return std::make_unique<FailedWork>(broken_, op->seq);
    }
    op->deadline = absl::Now() + op->timeout;
    inflight_.push_back(op);
    return std::make_unique<NcclWork>(this, std::move(op));
  }

  template <typename Call>
  absl::Status Enqueue(NcclOp* op, Call call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    if (wait_event_ != nullptr) {
      cudaEvent_t e = wait_event_;
      wait_event_ = nullptr;
      CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, e, 0));
    }
    NCCL_RETURN_IF_ERROR(call(comm_, stream_));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(op->done, stream_));
    return absl::OkStatus();
  }

  // The op's final status if it has one now.
  std::optional<absl::Status> Poll(NcclOp* op) {
    absl::MutexLock lock(&mu_);
    if (op->finished) return op->status;
    if (!broken_.ok()) return broken_;
    const cudaError_t e = cudaEventQuery(op->done);
    if (e == cudaErrorNotReady) return std::nullopt;
    if (e == cudaSuccess) {
      FinishLocked(op, absl::OkStatus());
    } else {
      BreakLocked(engine::cuda::CudaErrorToStatus(e, "cudaEventQuery(op)", __FILE__, __LINE__));
    }
    return op->finished ? op->status : broken_;
  }

  void FinishLocked(NcclOp* op, absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    op->finished = true;
    op->status = std::move(s);
    if (op->status.ok() && op->seq > completed_.load()) completed_.store(op->seq);
  }

  // Breaks the communicator with `s` (first one wins) and aborts the NCCL
  // communicator, which also ends its running kernels.
  void BreakLocked(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (broken_.ok()) broken_ = s;
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  // The watchdog thread: retires finished ops, fails timed-out ones and
  // notices asynchronous NCCL errors.
  void Watch() {
    while (!stop_.WaitForNotificationWithTimeout(options_.watchdog_interval)) {
      std::shared_ptr<NcclOp> late;
      std::string async_error;
      {
        absl::MutexLock lock(&mu_);
        while (!inflight_.empty()) {
          NcclOp* op = inflight_.front().get();
          if (!op->finished && broken_.ok() && cudaEventQuery(op->done) == cudaSuccess) {
            FinishLocked(op, absl::OkStatus());
          }
          if (!op->finished && broken_.ok()) break;
          cudaEventDestroy(op->done);
          inflight_.pop_front();
        }
        if (!broken_.ok()) continue;
        if (!inflight_.empty() && absl::Now() > inflight_.front()->deadline)
          late = inflight_.front();
        ncclResult_t async = ncclSuccess;
        if (comm_ != nullptr && ncclCommGetAsyncError(comm_, &async) == ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress) {
          async_error = ncclGetErrorString(async);
          if (late == nullptr && !inflight_.empty()) late = inflight_.front();
        }
        if (late == nullptr) continue;
        // Abort first: the hang check takes a while and NCCL kernels spin.
        if (comm_ != nullptr) {
          ncclCommAbort(comm_);
          comm_ = nullptr;
        }
      }
      const bool timed_out = async_error.empty();
      const std::string what = absl::StrCat(
          late->what, " on rank ", rank_, " of ", size_,
          timed_out ? absl::StrCat(" timed out after ", absl::FormatDuration(late->timeout))
                    : " failed");
      const HangVerdict v =
          CheckHang(store_, rank_, size_, late->seq, late->signature, what, options_.hang_grace);
      const absl::Status s = HangStatus(what, timed_out, async_error, v);
      spdlog::error("collective: {}", s.ToString());
      absl::MutexLock lock(&mu_);
      FinishLocked(late.get(), s);
      BreakLocked(s);
    }
  }

  Store* const store_;
  const int rank_;
  const int size_;
  const int device_;
  const NcclOptions options_;
  const cudaStream_t stream_;
  float* const scratch_;              // one float on the device, for Barrier
  cudaEvent_t wait_event_ = nullptr;  // owning thread only
  std::atomic<int64_t> issued_{0};
  std::atomic<int64_t> completed_{0};

  absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);  // null once aborted
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<NcclOp>> inflight_ ABSL_GUARDED_BY(mu_);
  std::pair<int64_t, std::string> recent_[kRecentOps] ABSL_GUARDED_BY(mu_);

  absl::Notification stop_;
  std::thread watchdog_;
  std::unique_ptr<HangListener> listener_;
};

absl::Status NcclWork::Wait() { return comm_->WaitOp(op_.get()); }
bool NcclWork::IsCompleted() { return comm_->IsDone(op_.get()); }

absl::StatusOr<ncclUniqueId> ExchangeId(Store* store, int first_rank, absl::Duration timeout) {
  ncclUniqueId id;
  if (first_rank == 0) {
    NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    RETURN_IF_ERROR(store->Set(kIdKey, absl::string_view(id.internal, sizeof(id.internal))));
    return id;
  }
  ASSIGN_OR_RETURN(std::string v, store->Get(kIdKey, timeout));
  if (v.size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: store key '", kIdKey, "' holds ",
                                                   v.size(), " bytes, want ", sizeof(id.internal)));
  }
  std::memcpy(id.internal, v.data(), v.size());
  return id;
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> CreateNcclCommunicators(
    Store* store, int world_size, int first_rank, std::vector<int> devices,
    const NcclOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("nccl: store: required");
  if (world_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: world_size: must be > 0, got ", world_size));
  }
  const int n = static_cast<int>(devices.size());
  if (n == 0) return absl::InvalidArgumentError("nccl: devices: must not be empty");
  if (first_rank < 0 || first_rank + n > world_size) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: ranks ", first_rank, "..",
                                                   first_rank + n - 1, " must lie in [0, ",
                                                   world_size, ")"));
  }
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  for (int d : devices) {
    if (d < 0 || d >= count) {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl: devices: CUDA:", d, " does not exist (", count, " devices)"));
    }
  }
  ASSIGN_OR_RETURN(ncclUniqueId id, ExchangeId(store, first_rank, options.init_timeout));

  std::vector<ncclComm_t> comms(n, nullptr);
  NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status init;
  for (int i = 0; i < n && init.ok(); ++i) {
    init = engine::cuda::CudaErrorToStatus(cudaSetDevice(devices[i]), "cudaSetDevice", __FILE__,
                                           __LINE__);
    if (init.ok()) {
      init = NcclErrorToStatus(ncclCommInitRank(&comms[i], world_size, id, first_rank + i),
                               "ncclCommInitRank", __FILE__, __LINE__);
    }
  }
  const absl::Status end = NcclErrorToStatus(ncclGroupEnd(), "ncclGroupEnd", __FILE__, __LINE__);
  if (init.ok()) init = end;
  auto cleanup = [&] {
    for (ncclComm_t c : comms) {
      if (c != nullptr) ncclCommAbort(c);
    }
  };
  if (!init.ok()) {
    cleanup();
    return init;
  }

  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int i = 0; i < n; ++i) {
    cudaStream_t stream = nullptr;
    float* scratch = nullptr;
    absl::Status s = [&]() -> absl::Status {
      CUDA_RETURN_IF_ERROR(cudaSetDevice(devices[i]));
      CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(float)));
      return absl::OkStatus();
    }();
    if (!s.ok()) {
      for (int j = i; j < n; ++j) ncclCommAbort(comms[j]);
      return s;
    }
    out.push_back(std::make_unique<NcclComm>(store, first_rank + i, world_size, devices[i],
                                             comms[i], stream, scratch, options));
  }
  return out;
}

}  // namespace yoke::collective
