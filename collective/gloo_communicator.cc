// Gloo communicator: bootstrap, the op thread, the watchdog and the hang
// check, Leave(), and the connection diagnosis after a failed bootstrap. Over
// 600 lines: they share GlooCore's state; the ops themselves are gloo_ops.cc.
#include "collective/gloo_communicator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "collective/gloo_ops.h"
#include "collective/half.h"
#include "collective/hang_check.h"
#include "collective/listen_ports.h"
#include "gloo/allgather.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/address.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/types.h"
#include "spdlog/spdlog.h"

namespace yoke::collective {
namespace {

std::chrono::milliseconds ToChronoMs(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Gloo's rendezvous store on top of ours. Gloo reports failure by throwing;
// the first failure's Status is kept so bootstrap can return it intact.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(collective::Store* base, absl::Duration timeout) : base_(base), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(base_->Set(Key(key), absl::string_view(data.data(), data.size())));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v = base_->Get(Key(key), timeout_);
    Check(v.status());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, ToChronoMs(timeout_)); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
    for (const std::string& k : keys) {
      Check(base_->Get(Key(k), std::max(deadline - absl::Now(), absl::ZeroDuration())).status());
    }
  }

  const absl::Status& error() const { return error_; }

 private:
  static std::string Key(const std::string& k) { return absl::StrCat("gloo/", k); }
  void Check(const absl::Status& s) {
    if (s.ok()) return;
    if (error_.ok()) error_ = s;
    throw gloo::IoException(std::string(s.message()));
  }

  collective::Store* base_;
  absl::Duration timeout_;
  absl::Status error_;
};

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

// How often the watchdog looks at the running op.
constexpr absl::Duration kWatchInterval = absl::Milliseconds(50);

// How many recent ops' signatures a core remembers for hang checks.
constexpr int kRecentOps = 64;

// One enqueued op. `done` and `status` are guarded by the owning core's mu_.
struct Op {
  int64_t seq = 0;
  std::string what;       // "allreduce #7 (bucket 3)"
  std::string signature;  // "allreduce 1000 f32 sum": must match on every rank
  absl::Duration timeout;
  std::function<void(const OpEnv&)> run;  // throws Gloo's exceptions
  bool leave = false;                     // Leave()'s: no seq, no watchdog, no hang check
  bool done = false;
  absl::Status status;
  absl::Time started = absl::InfiniteFuture();
};

class GlooCore {
 public:
  GlooCore(Store* store, int rank, int size, GlooOptions options,
           std::shared_ptr<gloo::Context> context)
      : store_(store),
        rank_(rank),
        size_(size),
        options_(std::move(options)),
        context_(std::move(context)),
        cache_(options_.ring_max_bytes) {}

  int rank() const { return rank_; }
  int size() const { return size_; }
  Store* store() const { return store_; }
  const GlooOptions& options() const { return options_; }
  int64_t issued() const { return issued_.load(); }
  int64_t completed() const { return completed_.load(); }

  std::shared_ptr<Op> Enqueue(const char* name, const Options& o, std::string signature,
                              std::function<void(const OpEnv&)> run) {
    auto op = std::make_shared<Op>();
    op->seq = issued_.load() + 1;
    op->signature = std::move(signature);
    op->what = absl::StrCat(name, " #", op->seq, o.tag.empty() ? "" : " (", o.tag,
                            o.tag.empty() ? "" : ")");
    op->timeout = o.timeout;
    op->run = std::move(run);
    absl::MutexLock lock(&mu_);
    recent_[op->seq % kRecentOps] = {op->seq, op->signature};
    queue_.push_back(op);
    work_cv_.Signal();
    issued_.store(op->seq);
    return op;
  }

  // Leave()'s op: queued behind every op issued so far, but outside the
  // sequence (issued_seq is unchanged, so a peer's hang check sees this rank
  // as not arrived at its next op, which is the truth).
  std::shared_ptr<Op> EnqueueLeave(absl::Duration timeout) {
    auto op = std::make_shared<Op>();
    op->what = "leave";
    op->timeout = timeout;
    op->leave = true;
    absl::MutexLock lock(&mu_);
    queue_.push_back(op);
    work_cv_.Signal();
    return op;
  }

  // The body of the background thread.
  void Loop() {
    while (true) {
      std::shared_ptr<Op> op;
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
        op->started = absl::Now();
        running_ = op;
      }
      absl::Status s = op->leave ? RunLeave(*op) : Run(op.get());
      absl::MutexLock lock(&mu_);
      running_ = nullptr;
      if (op->leave) {
        // Later ops fail at once: the peers are gone or going.
        Break(s.ok() ? absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " of ", size_,
                                                                  " has left the communicator"))
                     : s);
      } else if (s.ok()) {
        completed_.store(op->seq);
      } else {
        Break(s);
      }
      Finish(op.get(), s);  // a failed op keeps its own diagnosis
    }
    exited_.Notify();
  }

  // Blocks until `op` is done or the communicator is broken.
  absl::Status Wait(Op* op) {
    // A CondVar, not Mutex::Await: absl's conditional waits woke a jiffy
    // (4 ms) late here, which dominated small ops.
    absl::MutexLock lock(&mu_);
    while (!op->done && broken_.ok()) done_cv_.Wait(&mu_);
    return op->done ? op->status : broken_;
  }

  // The watchdog thread's body, until `stop`: fails the running op once it
  // is older than its timeout (after the hang check) and breaks the
  // communicator, whether or not anyone waits on it.
  void Watch(absl::Notification* stop) {
    while (!stop->WaitForNotificationWithTimeout(kWatchInterval)) {
      std::shared_ptr<Op> op;
      {
        absl::MutexLock lock(&mu_);
        if (running_ == nullptr || running_->leave || !broken_.ok() ||
            absl::Now() - running_->started < running_->timeout) {
          continue;
        }
        op = running_;
      }
      const std::string what =
          absl::StrCat(Where(*op), " timed out after ", absl::FormatDuration(op->timeout));
      const HangVerdict v =
          CheckHang(store_, rank_, size_, op->seq, op->signature, what, options_.hang_grace);
      absl::MutexLock lock(&mu_);
      Break(HangStatus(what, /*timed_out=*/true, "", v));
    }
  }

  // For the hang listener: how far this rank got, and what its op #seq was.
  SeqState State(int64_t seq) {
    absl::MutexLock lock(&mu_);
    const auto& [s, signature] = recent_[seq % kRecentOps];
    return SeqState{issued_.load(), completed_.load(), s == seq ? signature : ""};
  }

  // A peer's op failed (the hang listener got its request): break this
  // communicator too, so a late rank fails fast instead of timing out.
  void OnPeerFailure(const HangRequest& r) {
    const absl::Status s = PeerFailureStatus(r, rank_, size_, State(r.seq).signature);
    absl::MutexLock lock(&mu_);
    Break(s);
  }

  bool IsDone(Op* op) {
    absl::MutexLock lock(&mu_);
    return op->done || !broken_.ok();
  }

  void Abort(absl::string_view reason) {
    absl::MutexLock lock(&mu_);
    Break(absl::AbortedError(reason));
  }

  // Closes the connections (peers see this rank leave). Only after the
  // background thread has exited.
  void ReleaseContext() { context_.reset(); }

  // Stops the background thread once the queue is drained (queued ops fail
  // fast if broken). True if it exited within `wait`.
  bool Stop(absl::Duration wait) {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      work_cv_.Signal();
    }
    return exited_.WaitForNotificationWithTimeout(wait);
  }

 private:
  // Breaks the communicator with `s` unless it already is; wakes waiters.
  void Break(const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (broken_.ok()) broken_ = s;
    done_cv_.SignalAll();
  }

  void Finish(Op* op, const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    done_cv_.SignalAll();
    op->status = s;
    op->done = true;
    op->run = nullptr;
  }

  std::string Where(const Op& op) const {
    return absl::StrCat(op.what, " on rank ", rank_, " of ", size_);
  }

  // Runs the op, turning every exception into a Status.
  absl::Status Run(Op* op) {
    std::string error;
    try {
      // Gloo's own timeout is a backstop: Watch() fails the op at its
      // timeout (and runs the hang check) while Gloo still waits.
      const auto backstop = ToChronoMs(op->timeout + options_.hang_grace + absl::Seconds(5));
      op->run(OpEnv{context_, OpTag(op->seq, op->signature), backstop, &scratch_, &cache_});
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
    if (absl::Status b = Broken(); !b.ok()) return b;
    const bool timed_out = absl::StrContains(error, "Timed out");
    const std::string what = absl::StrCat(
        Where(*op), timed_out ? absl::StrCat(" timed out after ", absl::FormatDuration(op->timeout))
                              : " failed");
    const HangVerdict v =
        CheckHang(store_, rank_, size_, op->seq, op->signature, what, options_.hang_grace);
    return HangStatus(what, timed_out, error, v);
  }

  // Leave(): a zero-byte message to every peer and one from every peer, on
  // unbound buffers. A peer sends its message only after its last op, so
  // once all have arrived no peer needs this rank's connections any more.
  // (Unbound waits, unlike the registered buffers of the cached rings, count
  // a message that arrived before the peer's connection closed.) Bounded by
  // the op's timeout; a peer that closes instead fails it at once.
  absl::Status RunLeave(const Op& op) {
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
    if (absl::Status b = Broken(); !b.ok()) return b;
    const std::string what =
        absl::StrCat("leave on rank ", rank_, " of ", size_, ": not every peer left: ", error);
    return absl::StrContains(error, "Timed out") ? absl::DeadlineExceededError(what)
                                                 : absl::UnavailableError(what);
  }

  absl::Status Broken() {
    absl::MutexLock lock(&mu_);
    return broken_;
  }

  Store* const store_;
  const int rank_;
  const int size_;
  const GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;  // op thread only
  std::atomic<int64_t> issued_{0};
  std::atomic<int64_t> completed_{0};
  absl::Notification exited_;
  std::vector<uint16_t> scratch_;  // op thread only
  AllreduceCache cache_;           // op thread only

  absl::Mutex mu_;
  absl::CondVar work_cv_;  // the background thread waits for ops or stop_
  absl::CondVar done_cv_;  // Wait() waits for an op to finish or a break
  std::deque<std::shared_ptr<Op>> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);  // OK while usable
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<Op> running_ ABSL_GUARDED_BY(mu_);  // inside Gloo now
  std::pair<int64_t, std::string> recent_[kRecentOps] ABSL_GUARDED_BY(mu_);
};

// Gloo writes to its sockets with writev(), which raises SIGPIPE when the
// peer is gone, and SIGPIPE's default action kills the process: a dead peer
// must be an error, not our death. Installed once, and only over the
// default disposition (a program that handles SIGPIPE itself keeps its
// handler).
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

class GlooWork : public Work {
 public:
  GlooWork(std::shared_ptr<GlooCore> core, std::shared_ptr<Op> op)
      : core_(std::move(core)), op_(std::move(op)) {}
  absl::Status Wait() override { return core_->Wait(op_.get()); }
  bool IsCompleted() override { return core_->IsDone(op_.get()); }
  int64_t seq() const override { return op_->seq; }

 private:
  std::shared_ptr<GlooCore> core_;
  std::shared_ptr<Op> op_;
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
  GlooCommunicator(std::shared_ptr<GlooCore> core) : core_(std::move(core)) {
    thread_ = std::thread([core = core_] { core->Loop(); });
    watchdog_ = std::thread([this] { core_->Watch(&stop_watchdog_); });
    GlooCore* c = core_.get();
    listener_ = std::make_unique<HangListener>(
        c->store(), c->rank(), c->options().hang_poll, [c](int64_t seq) { return c->State(seq); },
        [c](const HangRequest& request) { c->OnPeerFailure(request); });
  }

  ~GlooCommunicator() override {
    stop_watchdog_.Notify();
    watchdog_.join();
    listener_.reset();
    core_->Abort("communicator destroyed");
    if (core_->Stop(core_->options().destroy_wait)) {
      thread_.join();
      core_->ReleaseContext();
    } else {
      spdlog::warn(
          "collective: gloo rank {}: an op is still inside Gloo; detaching its thread "
          "(it ends at the op's timeout)",
          core_->rank());
      thread_.detach();
    }
  }

  int rank() const override { return core_->rank(); }
  int size() const override { return core_->size(); }
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
    if (timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("leave: timeout: must be > 0, got ", absl::FormatDuration(timeout)));
    }
    std::shared_ptr<Op> op = core_->EnqueueLeave(timeout);
    return core_->Wait(op.get());
  }

  void Abort(absl::string_view reason) override { core_->Abort(reason); }
  int64_t issued_seq() const override { return core_->issued(); }
  int64_t completed_seq() const override { return core_->completed(); }

 private:
  std::unique_ptr<Work> Issue(const char* name, const Options& o, std::string signature,
                              std::function<void(const OpEnv&)> run) {
    if (o.timeout <= absl::ZeroDuration()) {
      return std::make_unique<FailedWork>(absl::InvalidArgumentError(
          absl::StrCat(name, ": timeout: must be > 0, got ", absl::FormatDuration(o.timeout))));
    }
    return std::make_unique<GlooWork>(
        core_, core_->Enqueue(name, o, std::move(signature), std::move(run)));
  }

  std::shared_ptr<GlooCore> core_;
  std::thread thread_;
  absl::Notification stop_watchdog_;
  std::thread watchdog_;
  std::unique_ptr<HangListener> listener_;
};

// "10.0.0.5:41234" for an IPv4 or IPv6 socket address.
std::string SockaddrText(const sockaddr_storage& ss) {
  char ip[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
    port = ntohs(a->sin6_port);
    return absl::StrCat("[", ip, "]:", port);
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
  port = ntohs(a->sin_port);
  return absl::StrCat(ip, ":", port);
}

// A TCP connection attempt to `ss`, bounded by `timeout`: "" when it
// connects, else why not (strerror, or "timed out").
std::string ProbeConnect(const sockaddr_storage& ss, absl::Duration timeout) {
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::strerror(errno);
  const socklen_t len = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::string why;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0) {
    if (errno != EINPROGRESS) {
      why = std::strerror(errno);
    } else {
      pollfd p{fd, POLLOUT, 0};
      int n = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout)));
      int err = 0;
      socklen_t el = sizeof(err);
      if (n == 0) {
        why = absl::StrCat("timed out after ", absl::FormatDuration(timeout));
      } else if (n < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) {
        why = std::strerror(errno);
      } else if (err != 0) {
        why = std::strerror(err);
      }
    }
  }
  ::close(fd);
  return why;
}

// After Gloo failed to connect this rank's pairs: finds the first peer this
// rank cannot reach, from the listening address the peer published in the
// store (Gloo's own error names neither the peer nor its address). Returns
// "" when every peer answers a probe (the failure was elsewhere).
std::string DiagnoseConnect(GlooStore* store, int rank, int size, const GlooOptions& o) {
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    std::vector<char> blob;
    try {
      blob = store->get(std::to_string(peer));
    } catch (const std::exception&) {
      continue;
    }
    // The peer published one address per pair (size - 1 of the same size);
    // all of them name its single listening socket.
    if (size < 2 || blob.empty() || blob.size() % (size - 1) != 0) continue;
    const size_t each = blob.size() / (size - 1);
    gloo::transport::tcp::Address addr(std::vector<char>(blob.begin(), blob.begin() + each));
    const std::string why = ProbeConnect(addr.getSockaddr(), absl::Seconds(3));
    if (why.empty()) continue;
    std::string self = absl::StrCat("rank ", rank);
    if (rank < static_cast<int>(o.rank_hosts.size())) {
      const std::string& h = o.rank_hosts[rank];
      absl::StrAppend(&self, " on ", h.substr(0, h.find('@')));
    } else {
      absl::StrAppend(&self, " on ", o.hostname);
    }
    std::string peer_name = absl::StrCat("rank ", peer, " at ", SockaddrText(addr.getSockaddr()));
    if (peer < static_cast<int>(o.rank_hosts.size())) {
      const std::string& h = o.rank_hosts[peer];
      absl::StrAppend(&peer_name, " (", h.substr(0, h.find('@')), ")");
    }
    return absl::StrCat(self, " could not connect to ", peer_name, ": ", why);
  }
  return "";
}

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
  const std::string where =
      absl::StrCat("gloo: rank ", rank, " of ", size, " on ", options.hostname);
  GlooStore gstore(store, options.connect_timeout);
  std::shared_ptr<gloo::Context> context;
  const int64_t exhausted_before = ListenPortRangeExhaustions();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(ToChronoMs(options.connect_timeout));
    ctx->connectFullMesh(gstore, device);
    context = std::move(ctx);
  } catch (const std::exception& e) {
    if (ListenPortRangeExhaustions() != exhausted_before) {
      const PortRange r = ListenPortRange();
      return absl::ResourceExhaustedError(
          absl::StrCat(where, ": no free port in the data-plane port range ", r.ToString(), " (",
                       r.size(), " ports; each rank needs one per peer, ", size - 1,
                       " here): widen the worker's "
                       "data_ports (gloo: ",
                       e.what(), ")"));
    }
    if (!gstore.error().ok()) {
      return absl::Status(
          gstore.error().code(),
          absl::StrCat(where, ": bootstrap through the store: ", gstore.error().message()));
    }
    const std::string which = DiagnoseConnect(&gstore, rank, size, options);
    if (!which.empty()) {
      return absl::UnavailableError(absl::StrCat(which, " (gloo: ", e.what(), ")"));
    }
    return absl::UnavailableError(absl::StrCat(where, ": cannot connect: ", e.what()));
  }
  auto core = std::make_shared<GlooCore>(store, rank, size, options, std::move(context));
  return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(core)));
}

}  // namespace yoke::collective
