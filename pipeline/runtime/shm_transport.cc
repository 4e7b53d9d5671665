#include "pipeline/runtime/shm_transport.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collective/communicator.h"
#include "collective/shm_segment.h"
#include "common/status.h"

namespace yoke::pipeline {

using collective::shm::Header;
using collective::shm::RankLine;
using collective::shm::Segment;

namespace {

constexpr int64_t kAlign = 64;
enum RecordState : uint32_t { kPending = 1, kTaken = 2, kSkip = 3 };

// A record's header; the message's floats follow it.
struct alignas(64) Record {
  std::atomic<uint32_t> state;
  int32_t kind;
  int32_t micro_batch;
  int32_t unused;
  int64_t elems;
  int64_t length;  // the whole record's bytes, a multiple of 64
};
static_assert(sizeof(Record) == kAlign, "a record's header is one cache line");

int64_t RoundUp(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int64_t RecordBytes(int64_t elems) {
  return kAlign + RoundUp(elems * static_cast<int64_t>(sizeof(float)));
}

// The segment's f32 chunk for a ring of at least `bytes`: the segment of 2
// local ranks holds 3 chunks, all of which the ring uses.
int64_t ChunkFor(int64_t bytes) {
  const int64_t per_chunk = (bytes + 2) / 3;
  return std::max<int64_t>(16, (per_chunk + 63) / 64 * 16);
}

}  // namespace

std::vector<bool> SharedLinks(const std::vector<std::string>& stage_hosts) {
  const int p = static_cast<int>(stage_hosts.size());
  std::vector<bool> links(std::max(p - 1, 0), false);
  if (const char* v = std::getenv("YOKE_SHM"); v != nullptr && std::string(v) == "0") return links;
  for (const std::string& h : stage_hosts) {
    if (collective::RankHost(h).empty()) return links;
  }
  for (int i = 0; i + 1 < p; ++i) {
    links[i] = collective::RankHost(stage_hosts[i]) == collective::RankHost(stage_hosts[i + 1]);
  }
  return links;
}

int64_t RingBytesFor(int in_flight, int64_t max_elems) {
  return static_cast<int64_t>(std::max(in_flight, 1) + 1) *
         RecordBytes(std::max<int64_t>(0, max_elems));
}

// One direction of a co-located link: the ring in its segment, as its
// sender or its receiver sees it.
struct ShmTransport::Link {
  std::unique_ptr<Segment> seg;
  int from = 0, to = 0;  // stages
  int me = 0, peer = 0;  // local indices in the segment (0: the lower stage)
  bool sending = false;
  char* ring = nullptr;
  int64_t cap = 0;    // bytes, a multiple of 64
  uint64_t head = 0;  // sender: bytes ever appended (its own counter)
  uint64_t tail = 0;  // receiver: bytes ever freed (its own counter)
  int64_t peak = 0;   // sender: the most bytes held at once

  Header* h() const { return seg->header(); }
  RankLine& sender() const { return h()->ranks[sending ? me : peer]; }
  RankLine& receiver() const { return h()->ranks[sending ? peer : me]; }
  Record* at(uint64_t offset) const {
    return reinterpret_cast<Record*>(ring + static_cast<int64_t>(offset % cap));
  }
  int peer_stage() const { return sending ? to : from; }
};

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Create(
    collective::Store* store, int stage, int stages, const std::vector<bool>& colocated,
    const ShmTransportOptions& options, std::unique_ptr<Transport> fallback) {
  if (store == nullptr || stages < 1 || stage < 0 || stage >= stages ||
      static_cast<int>(colocated.size()) != stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: stage ", stage, " is not one of ", stages,
                     " stages with a store and a co-location entry each"));
  }
  if (options.activation_ring_bytes <= 0 || options.gradient_ring_bytes <= 0) {
    return absl::InvalidArgumentError("pipeline: shared-memory rings need a positive size");
  }
  auto t = std::unique_ptr<ShmTransport>(new ShmTransport(stage, options, std::move(fallback)));
  // The link with the stage before first, then the one after: the lower
  // stage of a link makes its segments and waits for the upper one to map
  // them, so every stage's waits point up the pipeline and none is circular.
  // Within a link: the upward ring, then the downward one.
  for (const int n : {stage - 1, stage + 1}) {
    if (n < 0 || n >= stages) continue;
    if (!colocated[n]) {
      if (t->fallback_ == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("pipeline: stage ", n, " is on another host than stage ", stage,
                         " and there is no other transport to reach it"));
      }
      continue;
    }
    const int lo = std::min(stage, n), hi = std::max(stage, n);
    const int me = stage == lo ? 0 : 1;
    for (const bool up : {true, false}) {
      const int from = up ? lo : hi, to = up ? hi : lo;
      auto l = std::make_unique<Link>();
      l->from = from;
      l->to = to;
      l->me = me;
      l->peer = 1 - me;
      l->sending = from == stage;
      collective::PrefixStore link_store(store, absl::StrCat("link-", from, "-", to, "/"));
      const int64_t bytes = up ? options.activation_ring_bytes : options.gradient_ring_bytes;
      ASSIGN_OR_RETURN(
          l->seg,
          collective::shm::MakeSegment(
              &link_store, {lo, hi}, me, ChunkFor(bytes), options.connect_timeout,
              absl::StrCat("pipeline: stage ", stage, ", the shared-memory ring from stage ", from,
                           " to stage ", to)));
      l->ring = l->seg->slot<char>(0);
      l->cap =
          3 * l->seg->header()->chunk_elems * static_cast<int64_t>(sizeof(float)) / kAlign * kAlign;
      const int side = n < stage ? 0 : 1;
      (l->sending ? t->out_[side] : t->in_[side]) = std::move(l);
    }
  }
  return t;
}

ShmTransport::ShmTransport(int stage, const ShmTransportOptions& options,
                           std::unique_ptr<Transport> fallback)
    : stage_(stage), options_(options), fallback_(std::move(fallback)) {}

ShmTransport::~ShmTransport() { BreakLinks(); }

void ShmTransport::BreakLinks() {
  for (auto* links : {out_, in_}) {
    for (int side = 0; side < 2; ++side) {
      Link* l = links[side].get();
      if (l == nullptr) continue;
      int expected = 0;
      l->h()->broken_by.compare_exchange_strong(expected, 1 + l->me);
      collective::shm::WakePeers(l->h());
    }
  }
}

void ShmTransport::Abort(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (abort_why_.ok()) {
      abort_why_ = why.ok() ? absl::AbortedError("pipeline: the transport was aborted") : why;
    }
  }
  aborted_.store(true);
  BreakLinks();
}

absl::Status ShmTransport::Await(Link& l, absl::FunctionRef<std::string()> what,
                                 absl::FunctionRef<bool()> there) {
  const absl::Duration timeout = options_.timeout;
  const int stage = stage_;
  constexpr int kSpins = 2000, kYields = 100;
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  // A neighbour that died is found within 100 ms of the wait's start.
  absl::Time next_liveness = start + absl::Milliseconds(100);
  Header* h = l.h();
  for (int iter = 0;; ++iter) {
    if (there()) return absl::OkStatus();
    if (iter < kSpins) {
      collective::shm::CpuRelax();
      continue;
    }
    if (aborted_.load()) {
      std::lock_guard<std::mutex> lock(abort_mu_);
      return abort_why_;
    }
    if (const int b = h->broken_by.load(); b == 1 + l.peer) {
      return absl::AbortedError(absl::StrCat(
          "pipeline: ", what(), ": stage ", l.peer_stage(),
          " broke the shared-memory group of their link (its transport failed, was aborted "
          "or was closed while stage ",
          stage, " waited)"));
    }
    const absl::Time now = absl::Now();
    if (now >= next_liveness) {
      next_liveness = now + absl::Milliseconds(100);
      const RankLine& p = h->ranks[l.peer];
      if (p.pid_ns.load() == collective::shm::PidNamespace() &&
          !collective::shm::ProcessAlive(p.pid.load())) {
        return absl::UnavailableError(absl::StrCat("pipeline: ", what(), " failed: stage ",
                                                   l.peer_stage(), " (pid ", p.pid.load(),
                                                   ") died while this rank waited for it "
                                                   "(shared memory)"));
      }
    }
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("pipeline: stage ", stage, " waited ", absl::FormatDuration(timeout),
                       " for ", what(), ", which never came (shared memory)"));
    }
    if (iter < kSpins + kYields) {
      sched_yield();
    } else {
      collective::shm::SleepUnless(h, there);
    }
  }
}

ShmTransport::Link* ShmTransport::OutTo(int to) const {
  if (to == stage_ - 1) return out_[0].get();
  if (to == stage_ + 1) return out_[1].get();
  return nullptr;
}

ShmTransport::Link* ShmTransport::InFrom(int from) const {
  if (from == stage_ - 1) return in_[0].get();
  if (from == stage_ + 1) return in_[1].get();
  return nullptr;
}

bool ShmTransport::shared(int neighbour) const { return OutTo(neighbour) != nullptr; }

int64_t ShmTransport::ring_bytes(int neighbour) const {
  const Link* l = OutTo(neighbour);
  return l == nullptr ? 0 : l->cap;
}

int64_t ShmTransport::peak_ring_bytes(int neighbour) const {
  const Link* l = OutTo(neighbour);
  return l == nullptr ? 0 : l->peak;
}

absl::Status ShmTransport::Send(int to, MessageKind kind, int micro_batch,
                                const engine::Tensor& t) {
  Link* l = OutTo(to);
  if (l == nullptr) {
    if (fallback_ == nullptr || std::abs(to - stage_) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline: stage ", stage_, " may only send to a neighbour, not to stage ", to));
    }
    return fallback_->Send(to, kind, micro_batch, t);
  }
  const int64_t elems = t.numel();
  const int64_t need = RecordBytes(elems);
  // A record fits an empty ring from any position (after a skip to the end
  // where it must) only if the ring holds about two of it; the rings are
  // sized for at least that, so only a ring /dev/shm made smaller refuses.
  if (2 * need - kAlign > l->cap) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "pipeline: ", MessageName(stage_, to, kind, micro_batch), " needs ", need,
        " bytes, and the shared-memory ring to stage ", to, " holds ", l->cap,
        " (it needs twice that, less 64; a bigger /dev/shm, or YOKE_SHM=0 to send over Gloo)"));
  }
  const int64_t to_end = l->cap - static_cast<int64_t>(l->head % l->cap);
  const int64_t skip = to_end < need ? to_end : 0;
  RankLine& tail_line = l->receiver();
  auto room = [&] {
    const uint64_t tail = tail_line.done.load(std::memory_order_acquire);
    return static_cast<int64_t>(l->head - tail) + skip + need <= l->cap;
  };
  if (!room()) {
    RETURN_IF_ERROR(Await(
        *l,
        [&] {
          return absl::StrCat("sending ", MessageName(stage_, to, kind, micro_batch),
                              " (room in the ring)");
        },
        room));
  }
  if (skip > 0) {
    Record* s = l->at(l->head);
    s->kind = -1;
    s->micro_batch = -1;
    s->elems = 0;
    s->length = skip;
    s->state.store(kSkip, std::memory_order_relaxed);
    l->head += skip;
  }
  Record* r = l->at(l->head);
  r->kind = static_cast<int32_t>(kind);
  r->micro_batch = micro_batch;
  r->elems = elems;
  r->length = need;
  std::memcpy(reinterpret_cast<char*>(r) + kAlign, t.data<float>(),
              static_cast<size_t>(elems) * sizeof(float));
  r->state.store(kPending, std::memory_order_relaxed);
  l->head += need;
  l->peak = std::max(
      l->peak, static_cast<int64_t>(l->head - tail_line.done.load(std::memory_order_acquire)));
  l->sender().arrived.store(l->head, std::memory_order_release);
  collective::shm::WakePeers(l->h());
  return absl::OkStatus();
}

absl::Status ShmTransport::Recv(int from, MessageKind kind, int micro_batch, engine::Tensor* dst) {
  Link* l = InFrom(from);
  if (l == nullptr) {
    if (fallback_ == nullptr || std::abs(from - stage_) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline: stage ", stage_,
          " may only receive from a neighbour: ", MessageName(from, stage_, kind, micro_batch)));
    }
    return fallback_->Recv(from, kind, micro_batch, dst);
  }
  RankLine& head_line = l->sender();
  Record* found = nullptr;
  // The oldest pending record of this key between the tail and the head.
  auto find = [&] {
    const uint64_t head = head_line.arrived.load(std::memory_order_acquire);
    for (uint64_t c = l->tail; c < head;) {
      Record* r = l->at(c);
      // (Never torn: the sender stores the head after the whole record.)
      if (r->length < kAlign || r->length > l->cap) return false;
      if (r->state.load(std::memory_order_relaxed) == kPending &&
          r->kind == static_cast<int32_t>(kind) && r->micro_batch == micro_batch) {
        found = r;
        return true;
      }
      c += static_cast<uint64_t>(r->length);
    }
    return false;
  };
  if (!find()) {
    RETURN_IF_ERROR(Await(
        *l,
        [&] { return absl::StrCat("receiving ", MessageName(from, stage_, kind, micro_batch)); },
        find));
  }
  if (found->elems != dst->numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: ", MessageName(from, stage_, kind, micro_batch), " holds ",
                     found->elems, " values; the receiver expects ", dst->numel()));
  }
  std::memcpy(dst->data<float>(), reinterpret_cast<const char*>(found) + kAlign,
              static_cast<size_t>(found->elems) * sizeof(float));
  found->state.store(kTaken, std::memory_order_relaxed);
  // Free every taken or skipped record at the tail.
  const uint64_t head = head_line.arrived.load(std::memory_order_acquire);
  while (l->tail < head) {
    Record* r = l->at(l->tail);
    const uint32_t st = r->state.load(std::memory_order_relaxed);
    if (st != kTaken && st != kSkip) break;
    l->tail += static_cast<uint64_t>(r->length);
  }
  l->receiver().done.store(l->tail, std::memory_order_release);
  collective::shm::WakePeers(l->h());
  return absl::OkStatus();
}

}  // namespace yoke::pipeline
