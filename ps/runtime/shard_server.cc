#include "ps/runtime/shard_server.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/gloo_bootstrap.h"
#include "common/status.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"
#include "ps/runtime/links.h"
#include "spdlog/spdlog.h"

namespace yoke::ps {
absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Create(
    collective::Store* store, int workers, const Shard& shard, const float* initial,
    const v1::OptimizerSpec& optimizer, std::unique_ptr<engine::LrSchedule> schedule,
    const ServerOptions& options) {
  if (store == nullptr || workers < 1 || shard.ps < 0 || shard.count < 1 || schedule == nullptr) {
    return absl::InvalidArgumentError(
        "ps: a shard server needs a store, at least one worker, a shard of at least one float "
        "and a schedule");
  }
  if (options.consistency == Consistency::kBounded && options.max_staleness < 0) {
    return absl::InvalidArgumentError("ps: max_staleness must be >= 0");
  }
  if (options.start_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ps: start_step must be >= 0, got ", options.start_step));
  }
  std::unique_ptr<ShardServer> s(
      new ShardServer(store, workers, shard, std::move(schedule), options));
  s->params_.Declare("shard", {shard.count}, engine::Init::Constant(0));
  RETURN_IF_ERROR(s->params_.Finalize());
  std::memcpy(s->params_.flat_values().data<float>(), initial,
              static_cast<size_t>(shard.count) * sizeof(float));
  ASSIGN_OR_RETURN(s->optimizer_, engine::CreateOptimizer(optimizer, &s->params_));
  for (int w = 0; w < workers; ++w) RETURN_IF_ERROR(s->gate_.Join(w));
  return s;
}

ShardServer::ShardServer(collective::Store* store, int workers, const Shard& shard,
                         std::unique_ptr<engine::LrSchedule> schedule, const ServerOptions& options)
    : store_(store),
      workers_(workers),
      shard_(shard),
      schedule_(std::move(schedule)),
      options_(options),
      gate_(options.consistency, options.max_staleness),
      answers_(workers),
      peers_(workers),
      receiving_(workers, nullptr) {
  ServerStats::WorkerData start;
  start.next_step = options.start_step;
  stats_.workers.assign(static_cast<size_t>(workers), start);
}

ShardServer::~ShardServer() {
  StopLinks();
  for (int w = 0; w < workers_; ++w) {
    (void)WaitSent(w, answers_[w]);
    JoinSent(w);
  }
}

void ShardServer::JoinSent(int w) {
  Worker& p = peers_[w];
  if (p.join_buffer == nullptr) return;
  try {
    (void)p.join_buffer->waitSend(collective::ToChronoMs(options_.timeout));
  } catch (const std::exception&) {
    // Its link broke: nothing is in flight any more.
  }
  p.join_buffer.reset();
  p.join = {};
}

std::string ShardServer::Me() const { return absl::StrCat("PS task ", shard_.ps); }

void ShardServer::Abort() {
  Event e;
  e.kind = Event::kAborted;
  Post(std::move(e));
}

absl::Status ShardServer::Run() {
  StartLinks();
  absl::Status st = Serve();
  StopLinks();
  return st;
}

absl::Status ShardServer::Serve() {
  const auto all_left = [this] {
    for (const Worker& p : peers_) {
      if (!p.left) return false;
    }
    return true;
  };
  while (!all_left()) {
    ASSIGN_OR_RETURN(Event e, NextEvent());
    const int pushed = e.kind == Event::kPush ? e.worker : -1;
    RETURN_IF_ERROR(Handle(e));
    RETURN_IF_ERROR(ApplyComplete());
    RETURN_IF_ERROR(AnswerReady());
    RETURN_IF_ERROR(ServeSnapshots());
    if (pushed >= 0 && answers_[pushed].owed) ++stats_.held_answers;  // not answered at once
    Publish();
  }
  // Every worker is gone: whatever is still pending is complete.
  RETURN_IF_ERROR(ApplyComplete());
  Publish();
  for (int w = 0; w < workers_; ++w) {
    absl::Status sent = WaitSent(w, answers_[w]);
    if (!sent.ok()) RETURN_IF_ERROR(LinkFailed(w, sent));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardServer::Event> ShardServer::NextEvent() {
  absl::MutexLock l(&mu_);
  const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), options_.timeout)) {
    std::vector<std::string> owed, away;
    for (int w = 0; w < workers_; ++w) {
      const Worker& p = peers_[w];
      if (p.left) continue;
      if (p.departed) {
        away.push_back(absl::StrCat("worker ", w, " (", p.why, ")"));
      } else if (!answers_[w].owed) {  // not waiting for an answer: it owes a push
        owed.push_back(absl::StrCat("worker ", w, " (step ", gate_.Clock(w), ")"));
      }
    }
    return absl::DeadlineExceededError(
        absl::StrCat("ps: ", Me(), " waited ", absl::FormatDuration(options_.timeout), " for ",
                     owed.empty() ? "" : absl::StrCat("a push from ", absl::StrJoin(owed, ", ")),
                     !owed.empty() && !away.empty() ? ", and for " : "",
                     away.empty() ? "" : absl::StrCat(absl::StrJoin(away, ", "), " to come back"),
                     owed.empty() && away.empty() ? "a message" : "", ", which never came"));
  }
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

absl::Status ShardServer::Handle(Event& e) {
  const int w = e.worker;
  switch (e.kind) {
    case Event::kAborted:
      return absl::AbortedError(
          absl::StrCat("ps: ", Me(), ": receiving a push was aborted (a sibling replica failed)"));
    case Event::kFatal:
      return e.error;
    case Event::kLinked:
      return Linked(e);
    case Event::kDied:
      if (e.incarnation != peers_[w].incarnation && peers_[w].link != nullptr) {
        return absl::OkStatus();  // an older incarnation's, already replaced
      }
      return LinkFailed(w, e.error);
    case Event::kLeft:
      peers_[w].left = true;
      gate_.Leave(w);
      answers_[w].owed = false;
      return absl::OkStatus();
    case Event::kSnapshot:
      return AskSnapshot(w, e.header.clock);
    case Event::kPush: {
      Worker& p = peers_[w];
      const bool rejoined = p.rejoining;
      if (p.rejoining && e.header.clock >= gate_.Clock(w)) {
        // The step its PS tasks agreed on may be past this one's proposal.
        gate_.Leave(w);
        RETURN_IF_ERROR(gate_.JoinAt(w, e.header.clock));
      }
      p.rejoining = false;
      JoinSent(w);
      RETURN_IF_ERROR(CheckDataStep(w, e.header.step, rejoined));
      return ReceivePush(w, e.header, std::move(e.grads));
    }
  }
  return absl::OkStatus();
}

absl::Status ShardServer::LinkFailed(int w, const absl::Status& error) {
  if (options_.consistency == Consistency::kSync) {
    return absl::UnavailableError(
        absl::StrCat("ps: ", Me(), ": the link to worker ", w, " broke: ", error.message()));
  }
  Worker& p = peers_[w];
  if (p.departed || p.left) return absl::OkStatus();
  p.departed = true;
  p.rejoining = false;
  p.why = absl::StrCat("departed at step ", std::max<int64_t>(gate_.Clock(w), p.high_water), ": ",
                       error.message());
  p.link.reset();
  gate_.Leave(w);
  answers_[w] = Answer();  // its buffers belonged to the broken link
  p.join_buffer.reset();
  p.join = {};
  snapshots_.erase(std::remove_if(snapshots_.begin(), snapshots_.end(),
                                  [w](const SnapshotAsk& a) { return a.worker == w; }),
                   snapshots_.end());
  ++stats_.departures;
  spdlog::warn("ps: {}: worker {} {}; the others go on", Me(), w, p.why);
  return absl::OkStatus();
}

absl::Status ShardServer::Linked(Event& e) {
  const int w = e.worker;
  Worker& p = peers_[w];
  const bool first = p.incarnation < 0 && !p.departed && e.incarnation == 0;
  p.link = std::move(e.link);
  p.incarnation = e.incarnation;
  if (first) return absl::OkStatus();  // a fresh start: in the gate at step 0
  if (options_.consistency == Consistency::kSync) {
    return absl::FailedPreconditionError(
        absl::StrCat("ps: ", Me(), ": worker ", w, " linked again (incarnation ", e.incarnation,
                     "), but a sync job does not take restarted workers"));
  }
  if (!p.departed) {  // it came back before its old link was seen to break
    gate_.Leave(w);
    answers_[w] = Answer();
  }
  const int64_t slowest = gate_.SlowestClock();
  JoinHead head;
  head.clock = std::max(slowest, p.high_water);
  head.pushed = stats_.workers[static_cast<size_t>(w)].next_step;
  RETURN_IF_ERROR(gate_.JoinAt(w, head.clock));
  p.departed = false;
  p.rejoining = true;
  ++stats_.rejoins;
  // Sent without waiting: the worker takes it once it has linked every PS
  // task, and the others' pushes go on meanwhile.
  JoinSent(w);
  p.join.resize(sizeof(JoinHead) + static_cast<size_t>(shard_.count) * sizeof(float));
  std::memcpy(p.join.data(), &head, sizeof(head));
  std::memcpy(p.join.data() + sizeof(head), values(),
              static_cast<size_t>(shard_.count) * sizeof(float));
  try {
    p.join_buffer = p.link->createUnboundBuffer(p.join.data(), p.join.size());
    p.join_buffer->send(kLinkWorker, static_cast<uint64_t>(Slot::kJoin));
  } catch (const std::exception& ex) {
    return LinkFailed(w, absl::UnavailableError(ex.what()));
  }
  spdlog::info("ps: {}: worker {} rejoined (incarnation {}) at step {}", Me(), w, e.incarnation,
               head.clock);
  return absl::OkStatus();
}

absl::Status ShardServer::CheckDataStep(int w, int64_t step, bool rejoined) {
  ServerStats::WorkerData& d = stats_.workers[static_cast<size_t>(w)];
  if (d.first_step < 0 && !rejoined) {
    // Its first push. Every process of the attempt resumed from the latest
    // checkpoint when it started; one that started late may have found a
    // newer one than this PS task did.
    if (step != d.next_step) {
      spdlog::warn("ps: {}: worker {} starts at data step {}, not at the attempt's {}", Me(), w,
                   step, d.next_step);
    }
    d.next_step = step;
  }
  if (d.first_step < 0) d.first_step = step;
  if (step < d.next_step) {
    return absl::InvalidArgumentError(absl::StrCat("ps: ", Me(), " got worker ", w, "'s data step ",
                                                   step, " again (its next is ", d.next_step,
                                                   "): its examples would count twice"));
  }
  if (step > d.next_step) {
    if (!rejoined) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ps: ", Me(), " got worker ", w, "'s data step ", step, " where its next is ",
          d.next_step, ": the examples of the steps between would be lost"));
    }
    // Its earlier incarnation died pushing these: they reached another PS
    // task, not this one.
    d.lost += step - d.next_step;
    spdlog::warn(
        "ps: {}: worker {}'s data steps {} to {} never reached it (its incarnation died "
        "pushing them)",
        Me(), w, d.next_step, step - 1);
  }
  d.next_step = step + 1;
  ++d.pushes;
  return absl::OkStatus();
}

absl::Status ShardServer::ReceivePush(int worker, const PushHeader& h, std::vector<float> grads) {
  if (h.clock != gate_.Clock(worker) || h.samples < 0 ||
      grads.size() != static_cast<size_t>(shard_.count)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps: ", Me(), " got a push of step ", h.clock, " with ", h.samples, " samples from worker ",
        worker, ", whose next step is ", gate_.Clock(worker), " (samples must be >= 0)"));
  }
  ++stats_.pushes;
  RETURN_IF_ERROR(gate_.Finished(worker, h.clock));
  peers_[worker].high_water = std::max(peers_[worker].high_water, h.clock + 1);
  answers_[worker].owed = true;
  if (options_.consistency == Consistency::kAsync) {
    absl::Status st = h.samples > 0 ? Apply(grads.data(), h.samples) : absl::OkStatus();
    ReturnBuffer(std::move(grads));
    return st;
  }
  Pending& p = pending_[h.clock];
  if (p.grads.empty()) {
    p.grads.resize(workers_);
    p.samples.assign(workers_, -1);  // -1: not pushed
  }
  p.grads[worker] = std::move(grads);
  p.samples[worker] = h.samples;
  stats_.max_pending_pushes = std::max(stats_.max_pending_pushes, PendingPushes());
  return absl::OkStatus();
}

absl::Status ShardServer::Apply(const float* grads, int64_t samples) {
  float* g = params_.flat_grads().data<float>();
  if (grads != g) std::memcpy(g, grads, static_cast<size_t>(shard_.count) * sizeof(float));
  // The optimizer's count, not this run's: a restored shard's schedule goes on.
  RETURN_IF_ERROR(optimizer_->Step(schedule_->Lr(optimizer_->step_count()),
                                   1.0f / static_cast<float>(std::max<int64_t>(samples, 1))));
  ++stats_.updates;
  return absl::OkStatus();
}

int64_t ShardServer::CompleteClock() const {
  // With no live worker left every pending clock is as complete as it gets.
  for (int w = 0; w < workers_; ++w) {
    if (gate_.Clock(w) >= 0) return gate_.SlowestClock();
  }
  return std::numeric_limits<int64_t>::max();
}

int64_t ShardServer::PendingPushes() const {
  int64_t waiting = 0;
  for (const auto& [clock, q] : pending_) {
    for (int64_t n : q.samples) waiting += n >= 0;
  }
  return waiting;
}

absl::Status ShardServer::ApplyComplete() {
  const int64_t complete = CompleteClock();
  while (!pending_.empty() && pending_.begin()->first < complete) {
    Pending& p = pending_.begin()->second;
    float* sum = params_.flat_grads().data<float>();
    int64_t samples = 0;
    for (int w = 0; w < workers_; ++w) {  // worker order: the same sum every run
      if (p.samples[w] <= 0) continue;    // not pushed, or no examples
      const float* g = p.grads[w].data();
      if (samples == 0) {
        std::memcpy(sum, g, static_cast<size_t>(shard_.count) * sizeof(float));
      } else {
        for (int64_t i = 0; i < shard_.count; ++i) sum[i] += g[i];
      }
      samples += p.samples[w];
    }
    absl::Status st = samples > 0 ? Apply(sum, samples) : absl::OkStatus();
    for (auto& g : p.grads) {
      if (!g.empty()) ReturnBuffer(std::move(g));
    }
    pending_.erase(pending_.begin());
    RETURN_IF_ERROR(st);
  }
  return absl::OkStatus();
}

absl::Status ShardServer::AnswerReady() {
  for (int w = 0; w < workers_; ++w) {
    Answer& a = answers_[w];
    if (!a.owed || !gate_.MayStart(w) || peers_[w].link == nullptr) continue;
    absl::Status sent = WaitSent(w, a);
    if (!sent.ok()) {
      RETURN_IF_ERROR(LinkFailed(w, sent));
      continue;
    }
    if (a.buffer == nullptr) {
      a.values.resize(shard_.count);
      a.buffer = peers_[w].link->createUnboundBuffer(
          a.values.data(), static_cast<size_t>(shard_.count) * sizeof(float));
    }
    std::memcpy(a.values.data(), values(), static_cast<size_t>(shard_.count) * sizeof(float));
    try {
      a.buffer->send(kLinkWorker, static_cast<uint64_t>(Slot::kParams));
    } catch (const std::exception& e) {
      RETURN_IF_ERROR(
          LinkFailed(w, absl::UnavailableError(absl::StrCat("answering it failed: ", e.what()))));
      continue;
    }
    a.in_flight = true;
    a.owed = false;
  }
  return absl::OkStatus();
}

absl::Status ShardServer::WaitSent(int worker, Answer& a) {
  if (!a.in_flight) return absl::OkStatus();
  a.in_flight = false;
  try {
    if (!a.buffer->waitSend(collective::ToChronoMs(options_.timeout))) {
      return absl::AbortedError(absl::StrCat("ps: answering worker ", worker, " was aborted"));
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("ps: ", Me(), ": worker ", worker, " never took its parameters: ", e.what()));
  }
  return absl::OkStatus();
}

void ShardServer::Publish() {
  stats_.pending_pushes = PendingPushes();
  absl::MutexLock l(&published_mu_);
  published_ = stats_;
}

ServerStats ShardServer::stats() const {
  absl::MutexLock l(&published_mu_);
  return published_;
}

absl::Status ShardServer::RestoreOptimizer(
    const std::vector<std::pair<std::string, engine::Tensor>>& whole, int64_t steps) {
  const auto mine = optimizer_->State();
  if (mine.size() != whole.size() || steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ps: restoring ", whole.size(),
                                                   " optimizer state arrays and ", steps,
                                                   " steps into an optimizer of ", mine.size()));
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto& [name, t] = whole[i];
    if (name != mine[i].first || t.dtype() != engine::DType::kF32 || !t.device().is_cpu() ||
        (t.numel() != shard_.count && t.numel() < shard_.offset + shard_.count)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ps: optimizer state '", name, "' (", t.numel(), " values) does not hold ",
                       Me(), "'s shard of ", shard_.count, " values at ", shard_.offset,
                       " of the optimizer's '", mine[i].first, "'"));
    }
    const int64_t from = t.numel() == shard_.count ? 0 : shard_.offset;
    std::memcpy(mine[i].second.raw(), t.data<float>() + from,
                static_cast<size_t>(shard_.count) * sizeof(float));
  }
  optimizer_->set_step_count(steps);
  return absl::OkStatus();
}

absl::Status ShardServer::AskSnapshot(int worker, int64_t clock) {
  if (clock != gate_.Clock(worker) - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ps: ", Me(), " got a snapshot request after step ", clock, " from worker ",
                     worker, ", whose last pushed step is ", gate_.Clock(worker) - 1));
  }
  snapshots_.push_back(SnapshotAsk{worker, clock});
  return absl::OkStatus();
}

absl::Status ShardServer::ServeSnapshots() {
  const int64_t complete = CompleteClock();
  const bool async = options_.consistency == Consistency::kAsync;
  const auto state = optimizer_->State();
  const size_t floats = static_cast<size_t>(shard_.count) * (1 + state.size());
  for (auto it = snapshots_.begin(); it != snapshots_.end();) {
    // Sync and bounded: every update up to the asked step is applied (and
    // none after it: the asker's next push has not come).
    if (!async && it->clock >= complete) {
      ++it;
      continue;
    }
    std::vector<char> out(sizeof(SnapshotHead) + floats * sizeof(float));
    const SnapshotHead head{optimizer_->step_count(), static_cast<int64_t>(state.size())};
    std::memcpy(out.data(), &head, sizeof(head));
    char* p = out.data() + sizeof(head);
    const size_t bytes = static_cast<size_t>(shard_.count) * sizeof(float);
    std::memcpy(p, values(), bytes);
    for (size_t i = 0; i < state.size(); ++i) {
      std::memcpy(p + (i + 1) * bytes, state[i].second.raw(), bytes);
    }
    const int w = it->worker;
    it = snapshots_.erase(it);
    try {
      auto buffer = peers_[w].link->createUnboundBuffer(out.data(), out.size());
      buffer->send(kLinkWorker, static_cast<uint64_t>(Slot::kSnapshot));
      if (!buffer->waitSend(collective::ToChronoMs(options_.timeout))) {
        return absl::AbortedError("ps: sending a snapshot was aborted");
      }
    } catch (const std::exception& e) {
      RETURN_IF_ERROR(LinkFailed(
          w, absl::UnavailableError(absl::StrCat("sending it a snapshot failed: ", e.what()))));
      it = snapshots_.begin();  // LinkFailed dropped its other requests
      continue;
    }
    ++stats_.snapshots;
  }
  return absl::OkStatus();
}

}  // namespace yoke::ps
