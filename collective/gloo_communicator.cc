// Gloo communicator: the transport under the op queue (op_queue.h). Each
// op's Gloo calls with their tag, Gloo's exceptions turned into statuses with
// the hang check's verdict, the watchdog's hang check, Leave()'s goodbye
// messages, and the argument checks. Bootstrap is gloo_bootstrap.cc; the
// allreduce algorithms are gloo_ops.cc.
#include "collective/gloo_communicator.h"

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collective/gloo_bootstrap.h"
#include "collective/gloo_ops.h"
#include "collective/half.h"
#include "collective/hang_check.h"
#include "collective/op_queue.h"
#include "common/status.h"
#include "gloo/allgather.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/types.h"
#include "spdlog/spdlog.h"

namespace yoke::collective {
namespace {

// What an op's body gets from the background thread.
struct OpEnv {
  const std::shared_ptr<gloo::Context>& context;
  uint32_t tag;  // the op's seq: every rank tags the same op alike
  std::chrono::milliseconds timeout;
  std::vector<uint16_t>* scratch;  // for wire compression; op thread only
  AllreduceCache* cache;
};

// The Gloo tag of op `seq` with `signature`: equal on every rank that calls
// the same op, different (but for a 2^-32 chance) otherwise, so mismatched
// ops never exchange bytes (Gloo would abort the process on a size
// mismatch) and wait out their timeout instead. FNV-1a: the same in every
// process.
uint32_t OpTag(int64_t seq, const std::string& signature) {
  uint32_t h = 2166136261u;
  for (unsigned char ch : signature) h = (h ^ ch) * 16777619u;
  return h ^ static_cast<uint32_t>(static_cast<uint64_t>(seq) * 0x9E3779B1u);
}

// Leave()'s messages: Gloo slots under a prefix of their own (Gloo's
// collectives use 0x01..0x08, registered buffers small numbers), so they
// match no op of the sequence.
constexpr uint8_t kLeaveSlotPrefix = 0x59;

// An op's Gloo calls; throws Gloo's exceptions.
using Body = std::function<void(const OpEnv&)>;

// The transport: the Gloo context and the op thread's state. Its ops run on
// the queue's worker thread, whose op closures own it (shared_ptr): a worker
// detached by the destructor keeps it until its op returns.
class GlooCore {
 public:
  GlooCore(OpQueue* queue, Store* store, int rank, int size, GlooOptions options,
           std::shared_ptr<gloo::Context> context)
      : queue_(queue),
        store_(store),
        rank_(rank),
        size_(size),
        options_(std::move(options)),
        context_(std::move(context)),
        cache_(options_.ring_max_bytes) {}

  const GlooOptions& options() const { return options_; }

  // Closes the connections (peers see this rank leave). Only after the
  // queue's worker has exited.
  void ReleaseContext() { context_.reset(); }

  // Runs the op, turning every exception into a Status.
  absl::Status Run(const OpQueue::Op& op, const Body& body) {
    std::string error;
    try {
      // Gloo's own timeout is a backstop: the queue's watchdog (Overdue) fails the op at its
      // timeout (and runs the hang check) while Gloo still waits.
      const auto backstop = ToChronoMs(op.timeout + options_.hang_grace + absl::Seconds(5));
      body(OpEnv{context_, OpTag(op.seq, op.signature), backstop, &scratch_, &cache_});
      return absl::OkStatus();
    } catch (const gloo::IoException& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown exception";
    }
    // Aborted meanwhile: keep that status (and leave the store alone, the
    // communicator may be going away).
    if (absl::Status b = queue_->broken(); !b.ok()) return b;
    const bool timed_out = absl::StrContains(error, "Timed out");
    const std::string what =
        absl::StrCat(queue_->Where(op),
                     timed_out ? absl::StrCat(" timed out after ", absl::FormatDuration(op.timeout))
                               : " failed");
    const HangVerdict v =
        CheckHang(store_, rank_, size_, op.seq, op.signature, what, options_.hang_grace);
    return HangStatus(what, timed_out, error, v);
  }

  // Leave(): a zero-byte message to every peer and one from every peer, on
  // unbound buffers. A peer sends its message only after its last op, so
  // once all have arrived no peer needs this rank's connections any more.
  // (Unbound waits, unlike the registered buffers of the cached rings, count
  // a message that arrived before the peer's connection closed.) Bounded by
  // the op's timeout; a peer that closes instead fails it at once.
  absl::Status RunLeave(const OpQueue::Op& op) {
    if (size_ == 1) return absl::OkStatus();
    const absl::Time deadline = absl::Now() + op.timeout;
    std::string error;
    try {
      auto buf = context_->createUnboundBuffer(nullptr, 0);
      const uint64_t slot = gloo::Slot::build(kLeaveSlotPrefix, 0);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        buf->recv(peer, slot);
        buf->send(peer, slot);
      }
      for (int i = 0; i < size_ - 1; ++i) buf->waitRecv(ToChronoMs(deadline - absl::Now()));
      for (int i = 0; i < size_ - 1; ++i) buf->waitSend(ToChronoMs(deadline - absl::Now()));
      return absl::OkStatus();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (absl::Status b = queue_->broken(); !b.ok()) return b;
    const std::string what =
        absl::StrCat("leave on rank ", rank_, " of ", size_, ": not every peer left: ", error);
    return absl::StrContains(error, "Timed out") ? absl::DeadlineExceededError(what)
                                                 : absl::UnavailableError(what);
  }

  // The watchdog's verdict on an op older than its timeout: DEADLINE_EXCEEDED
  // (or INVALID_ARGUMENT for ranks that called another op) after the hang
  // check.
  absl::Status Overdue(const OpQueue::Op& op) {
    const std::string what =
        absl::StrCat(queue_->Where(op), " timed out after ", absl::FormatDuration(op.timeout));
    const HangVerdict v =
        CheckHang(store_, rank_, size_, op.seq, op.signature, what, options_.hang_grace);
    return HangStatus(what, /*timed_out=*/true, "", v);
  }

 private:
  OpQueue* const queue_;  // outlives every op's run, which owns this core
  Store* const store_;
  const int rank_;
  const int size_;
  const GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;  // op thread only
  std::vector<uint16_t> scratch_;           // op thread only
  AllreduceCache cache_;                    // op thread only
};

absl::Status CheckCpu(const char* op, const char* arg, const Buffer& b) {
  if (b.device != DeviceKind::kCpu) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", arg, ".device: the gloo backend takes CPU buffers, got CUDA:", b.device_index));
  }
  if (b.count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", arg, ".count: must be >= 0, got ", b.count));
  }
  if (b.count > 0 && b.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", arg, ".data: null with count ", b.count));
  }
  return absl::OkStatus();
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(Store* store, int rank, int size, const GlooOptions& options,
                   std::shared_ptr<gloo::Context> context)
      : queue_(OpQueue::Create(rank, size)),
        core_(std::make_shared<GlooCore>(queue_.get(), store, rank, size, options,
                                         std::move(context))) {
    queue_->StartWatchdog([c = core_.get()](const OpQueue::Op& op) { return c->Overdue(op); });
    OpQueue* q = queue_.get();
    listener_ = std::make_unique<HangListener>(
        store, rank, options.hang_poll, [q](int64_t seq) { return q->State(seq); },
        [q](const HangRequest& r) {
          // A peer's op failed: break this communicator too, so a late rank
          // fails fast instead of timing out.
          q->Break(PeerFailureStatus(r, q->rank(), q->size(), q->State(r.seq).signature),
                   OpQueue::BreakCause::kPeer);
        });
  }

  ~GlooCommunicator() override {
    queue_->StopWatchdog();
    listener_.reset();
    queue_->Break(absl::AbortedError("communicator destroyed"), OpQueue::BreakCause::kShutdown);
    // The worker fails the queued ops fast; an op still inside Gloo ends at
    // its own timeout.
    if (queue_->Stop(core_->options().destroy_wait)) {
      core_->ReleaseContext();
    } else {
      spdlog::warn(
          "collective: gloo rank {}: an op is still inside Gloo; detaching its thread "
          "(it ends at the op's timeout)",
          queue_->rank());
    }
  }

  int rank() const override { return queue_->rank(); }
  int size() const override { return queue_->size(); }
  const char* backend() const override { return "gloo"; }

  std::unique_ptr<Work> Allreduce(Buffer buf, const AllreduceOptions& o) override {
    absl::Status s = CheckCpu("allreduce", "buf", buf);
    const bool compress = o.wire != DataType::kF32 && o.wire != buf.dtype;
    if (s.ok() && compress &&
        !(buf.dtype == DataType::kF32 && (o.wire == DataType::kF16 || o.wire == DataType::kBF16))) {
      s = absl::InvalidArgumentError(
          absl::StrCat("allreduce: wire: only f32 buffers may travel as f16 or bf16, got buffer ",
                       DataTypeName(buf.dtype), " and wire ", DataTypeName(o.wire)));
    }
    if (!s.ok()) return std::make_unique<FailedWork>(s);
    const int n = size();
    std::string sig = absl::StrCat("allreduce ", buf.count, " ", DataTypeName(buf.dtype),
                                   o.op == ReduceOp::kSum ? " sum" : " average",
                                   compress ? absl::StrCat(" wire ", DataTypeName(o.wire)) : "");
    return Issue("allreduce", o, std::move(sig),
                 [buf, n, op = o.op, wire = o.wire, compress](const OpEnv& env) {
                   if (buf.count == 0) return;
                   if (n > 1) {
                     Buffer wbuf = buf;
                     if (compress) {
                       env.scratch->resize(buf.count);
                       wbuf = Buffer{env.scratch->data(), buf.count, wire};
                       const float* f = static_cast<const float*>(buf.data);
                       if (wire == DataType::kF16)
                         F32ToF16(f, env.scratch->data(), buf.count);
                       else
                         F32ToBF16(f, env.scratch->data(), buf.count);
                     }
                     env.cache->Sum(env.context, wbuf, env.tag, env.timeout);
                     if (compress) {
                       float* f = static_cast<float*>(buf.data);
                       if (wire == DataType::kF16)
                         F16ToF32(env.scratch->data(), f, buf.count);
                       else
                         BF16ToF32(env.scratch->data(), f, buf.count);
                     }
                   }
                   if (op == ReduceOp::kAverage && n > 1) DivideBy(buf, n);
                 });
  }

  std::unique_ptr<Work> Broadcast(Buffer buf, int root, const Options& o) override {
    absl::Status s = CheckCpu("broadcast", "buf", buf);
    if (s.ok() && (root < 0 || root >= size())) {
      s = absl::InvalidArgumentError(
          absl::StrCat("broadcast: root: must be in [0, ", size(), "), got ", root));
    }
    if (!s.ok()) return std::make_unique<FailedWork>(s);
    const int n = size();
    std::string sig =
        absl::StrCat("broadcast ", buf.count, " ", DataTypeName(buf.dtype), " root ", root);
    return Issue("broadcast", o, std::move(sig), [buf, root, n](const OpEnv& env) {
      if (buf.count == 0 || n == 1) return;
      gloo::BroadcastOptions g(env.context);
      g.setOutput(static_cast<uint8_t*>(buf.data), buf.bytes());
      g.setRoot(root);
      g.setTag(env.tag);
      g.setTimeout(env.timeout);
      gloo::broadcast(g);
    });
  }

  std::unique_ptr<Work> Allgather(Buffer in, Buffer out, const Options& o) override {
    absl::Status s = CheckCpu("allgather", "in", in);
    if (s.ok()) s = CheckCpu("allgather", "out", out);
    if (s.ok() && (in.dtype != out.dtype || out.count != in.count * size())) {
      s = absl::InvalidArgumentError(absl::StrCat(
          "allgather: out: must hold size() * in.count = ", size(), " * ", in.count, " ",
          DataTypeName(in.dtype), " elements, got ", out.count, " ", DataTypeName(out.dtype)));
    }
    if (!s.ok()) return std::make_unique<FailedWork>(s);
    const int n = size();
    std::string sig = absl::StrCat("allgather ", in.count, " ", DataTypeName(in.dtype));
    return Issue("allgather", o, std::move(sig), [in, out, n](const OpEnv& env) {
      if (in.count == 0) return;
      if (n == 1) {
        if (in.data != out.data) std::memmove(out.data, in.data, in.bytes());
        return;
      }
      gloo::AllgatherOptions g(env.context);
      g.setInput(static_cast<uint8_t*>(in.data), in.bytes());
      g.setOutput(static_cast<uint8_t*>(out.data), out.bytes());
      g.setTag(env.tag);
      g.setTimeout(env.timeout);
      gloo::allgather(g);
    });
  }

  std::unique_ptr<Work> Barrier(const Options& o) override {
    const int n = size();
    return Issue("barrier", o, "barrier", [n](const OpEnv& env) {
      if (n == 1) return;
      gloo::BarrierOptions g(env.context);
      g.setTag(env.tag);
      g.setTimeout(env.timeout);
      gloo::barrier(g);
    });
  }

  absl::Status Leave(absl::Duration timeout) override {
    return queue_->Leave(timeout,
                         [core = core_](const OpQueue::Op& op) { return core->RunLeave(op); });
  }

  void Abort(absl::string_view reason) override { queue_->Abort(reason); }
  int64_t issued_seq() const override { return queue_->issued(); }
  int64_t completed_seq() const override { return queue_->completed(); }

 private:
  std::unique_ptr<Work> Issue(const char* name, const Options& o, std::string signature,
                              Body body) {
    return queue_->Issue(name, o, std::move(signature),
                         [core = core_, body = std::move(body)](const OpQueue::Op& op) {
                           return core->Run(op, body);
                         });
  }

  std::shared_ptr<OpQueue> queue_;
  std::shared_ptr<GlooCore> core_;  // also owned by the queued ops' runs
  std::unique_ptr<HangListener> listener_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(Store* store, int rank,
                                                                     int size,
                                                                     const GlooOptions& options) {
  if (store == nullptr) return absl::InvalidArgumentError("gloo: store: required");
  if (size <= 0)
    return absl::InvalidArgumentError(absl::StrCat("gloo: size: must be > 0, got ", size));
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank: must be in [0, ", size, "), got ", rank));
  }
  IgnoreSigpipe();
  ASSIGN_OR_RETURN(std::shared_ptr<gloo::Context> context, ConnectGloo(store, rank, size, options));
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(store, rank, size, options, std::move(context)));
}

}  // namespace yoke::collective
