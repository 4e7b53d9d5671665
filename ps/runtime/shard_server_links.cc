// ShardServer's link threads: one per worker, linking each of its
// incarnations in turn and handing the main loop what arrives
// (ps/runtime/shard_server.h).
#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/gloo_bootstrap.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"
#include "ps/runtime/links.h"
#include "ps/runtime/shard_server.h"

namespace yoke::ps {

namespace {

// How long a link thread waits on the store for a worker's next
// incarnation before it checks whether the server stops.
constexpr absl::Duration kPoll = absl::Milliseconds(200);
// A restarted worker announces its incarnation just before it links, so a
// relink that takes longer than this found a worker that died again.
constexpr absl::Duration kRelinkTimeout = absl::Seconds(10);
// A header receive waits for the worker's next step however long it takes:
// the main loop's timeout decides when that is too long, and stopping
// aborts the wait.
constexpr std::chrono::hours kForever(24 * 365);

}  // namespace

void ShardServer::StartLinks() {
  for (int w = 0; w < workers_; ++w) threads_.emplace_back([this, w] { LinkLoop(w); });
}

void ShardServer::StopLinks() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    for (auto* b : receiving_) {
      if (b != nullptr) b->abortWaitRecv();
    }
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
}

bool ShardServer::Stopping() {
  absl::MutexLock l(&mu_);
  return stopping_;
}

void ShardServer::Post(Event e) {
  absl::MutexLock l(&mu_);
  events_.push_back(std::move(e));
}

std::vector<float> ShardServer::TakeBuffer() {
  std::vector<float> b;
  {
    absl::MutexLock l(&mu_);
    if (!free_.empty()) {
      b = std::move(free_.back());
      free_.pop_back();
    }
  }
  b.resize(static_cast<size_t>(shard_.count));
  return b;
}

void ShardServer::ReturnBuffer(std::vector<float> b) {
  absl::MutexLock l(&mu_);
  // Enough for every worker's pushes of the clocks the gate lets pend.
  if (free_.size() < static_cast<size_t>(2 * workers_)) free_.push_back(std::move(b));
}

void ShardServer::LinkLoop(int w) {
  int64_t next = 0;  // the lowest incarnation not tried yet
  while (!Stopping()) {
    auto latest = LatestIncarnation(store_, w, kPoll);
    if (!latest.ok()) {
      if (absl::IsDeadlineExceeded(latest.status())) continue;
      Event e;
      e.kind = Event::kFatal;
      e.worker = w;
      e.error = latest.status();
      Post(std::move(e));
      return;
    }
    if (*latest < next) {
      absl::SleepFor(kPoll);
      continue;
    }
    const int64_t n = *latest;
    next = n + 1;
    collective::GlooOptions o =
        options_.link_options ? options_.link_options(w) : collective::GlooOptions();
    if (n > 0) o.connect_timeout = std::min(o.connect_timeout, kRelinkTimeout);
    auto link = ConnectLink(store_, w, n, shard_.ps, true, o);
    if (!link.ok()) {
      // It died before it reached this PS task: as good as departed.
      Event e;
      e.kind = Event::kDied;
      e.worker = w;
      e.incarnation = n;
      e.error = link.status();
      Post(std::move(e));
      continue;
    }
    Event e;
    e.kind = Event::kLinked;
    e.worker = w;
    e.incarnation = n;
    e.link = *link;
    Post(std::move(e));
    if (Receive(w, n, **link)) return;
  }
}

bool ShardServer::Receive(int w, int64_t incarnation, gloo::Context& link) {
  const auto died = [&](const std::string& what) {
    Event e;
    e.kind = Event::kDied;
    e.worker = w;
    e.incarnation = incarnation;
    e.error = absl::UnavailableError(what);
    Post(std::move(e));
    return false;
  };
  PushHeader h;
  auto header = link.createUnboundBuffer(&h, sizeof(h));
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return false;
    receiving_[w] = header.get();
  }
  const auto done = [&](bool left) {
    absl::MutexLock l(&mu_);
    receiving_[w] = nullptr;
    return left;
  };
  while (true) {
    try {
      header->recv(kLinkWorker, static_cast<uint64_t>(Slot::kHeader));
      if (!header->waitRecv(kForever)) return done(false);  // stopping
    } catch (const std::exception& e) {
      done(false);
      return died(absl::StrCat("its link broke: ", e.what()));
    }
    Event e;
    e.worker = w;
    e.incarnation = incarnation;
    e.header = h;
    if (h.clock == kLeave) {
      e.kind = Event::kLeft;
      Post(std::move(e));
      return done(true);
    }
    if (h.samples == kSnapshot) {
      e.kind = Event::kSnapshot;
      Post(std::move(e));
      continue;
    }
    e.kind = Event::kPush;
    e.grads = TakeBuffer();
    try {
      auto grads = link.createUnboundBuffer(e.grads.data(), e.grads.size() * sizeof(float));
      grads->recv(kLinkWorker, static_cast<uint64_t>(Slot::kGrads));
      if (!grads->waitRecv(collective::ToChronoMs(options_.timeout))) return done(false);
    } catch (const std::exception& ex) {
      done(false);
      return died(absl::StrCat("its link broke receiving step ", h.clock, ": ", ex.what()));
    }
    Post(std::move(e));
  }
}

}  // namespace yoke::ps
