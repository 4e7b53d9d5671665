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

namespace yoke::ps {
absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Create(
    std::shared_ptr<gloo::Context> context, int workers, const Shard& shard, const float* initial,
    const v1::OptimizerSpec& optimizer, std::unique_ptr<engine::LrSchedule> schedule,
    const ServerOptions& options) {
  if (context == nullptr || workers < 1 || context->rank != PsRank(workers, shard.ps) ||
      shard.count < 1 || schedule == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps: a shard server needs its PS task's context (rank ", PsRank(workers, shard.ps),
        "), at least one worker, a shard of at least one float and a schedule"));
  }
  if (options.consistency == Consistency::kBounded && options.max_staleness < 0) {
    return absl::InvalidArgumentError("ps: max_staleness must be >= 0");
  }
  std::unique_ptr<ShardServer> s(
      new ShardServer(std::move(context), workers, shard, std::move(schedule), options));
  s->params_.Declare("shard", {shard.count}, engine::Init::Constant(0));
  RETURN_IF_ERROR(s->params_.Finalize());
  std::memcpy(s->params_.flat_values().data<float>(), initial,
              static_cast<size_t>(shard.count) * sizeof(float));
  ASSIGN_OR_RETURN(s->optimizer_, engine::CreateOptimizer(optimizer, &s->params_));
  for (int w = 0; w < workers; ++w) RETURN_IF_ERROR(s->gate_.Join(w));
  s->inbox_ = s->context_->createUnboundBuffer(&s->header_, sizeof(PushHeader));
  return s;
}

ShardServer::ShardServer(std::shared_ptr<gloo::Context> context, int workers, const Shard& shard,
                         std::unique_ptr<engine::LrSchedule> schedule, const ServerOptions& options)
    : context_(std::move(context)),
      workers_(workers),
      shard_(shard),
      schedule_(std::move(schedule)),
      options_(options),
      gate_(options.consistency, options.max_staleness),
      answers_(workers) {}

ShardServer::~ShardServer() {
  for (int w = 0; w < workers_; ++w) (void)WaitSent(w, answers_[w]);
}

void ShardServer::Abort() { inbox_->abortWaitRecv(); }

absl::Status ShardServer::Run() {
  const PushHeader& header = header_;
  std::vector<bool> gone(workers_, false);
  int live = workers_;
  const std::string me = PsName(workers_, context_->rank);
  while (live > 0) {
    std::vector<int> from;
    for (int w = 0; w < workers_; ++w) {
      if (!gone[w]) from.push_back(w);
    }
    int src = -1;
    try {
      inbox_->recv(from, static_cast<uint64_t>(Slot::kHeader));
      if (!inbox_->waitRecv(&src, collective::ToChronoMs(options_.timeout))) {
        return absl::AbortedError(
            absl::StrCat("ps: ", me, ": receiving a push was aborted (a sibling replica failed)"));
      }
    } catch (const std::exception& e) {
      std::vector<std::string> owed;
      for (int w : from) {  // those not waiting for an answer owe a push
        if (!answers_[w].owed)
          owed.push_back(absl::StrCat("worker ", w, " (step ", gate_.Clock(w), ")"));
      }
      if (collective::IsGlooTimeout(e.what())) {
        return absl::DeadlineExceededError(
            absl::StrCat("ps: ", me, " waited ", absl::FormatDuration(options_.timeout),
                         " for a push from ", absl::StrJoin(owed, ", "), ", which never came"));
      }
      return absl::UnavailableError(absl::StrCat("ps: ", me, ": receiving a push from one of ",
                                                 absl::StrJoin(owed, ", "), " failed: ", e.what()));
    }
    if (header.samples == kSnapshot) {
      RETURN_IF_ERROR(AskSnapshot(src, header.clock));
    } else if (header.clock == kLeave) {
      gone[src] = true;
      --live;
      gate_.Leave(src);
      answers_[src].owed = false;
    } else {
      RETURN_IF_ERROR(ReceivePush(src, header));
    }
    RETURN_IF_ERROR(ApplyComplete());
    RETURN_IF_ERROR(AnswerReady());
    RETURN_IF_ERROR(ServeSnapshots());
    if (header.samples >= 0 && answers_[src].owed) ++stats_.held_answers;
    Publish();
  }
  // Every worker is gone: whatever is still pending is complete.
  RETURN_IF_ERROR(ApplyComplete());
  Publish();
  for (int w = 0; w < workers_; ++w) RETURN_IF_ERROR(WaitSent(w, answers_[w]));
  return absl::OkStatus();
}

absl::Status ShardServer::ReceivePush(int worker, const PushHeader& h) {
  const std::string me = PsName(workers_, context_->rank);
  if (h.clock != gate_.Clock(worker) || h.samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps: ", me, " got a push of step ", h.clock, " with ", h.samples, " samples from worker ",
        worker, ", whose next step is ", gate_.Clock(worker), " (samples must be >= 0)"));
  }
  const bool async = options_.consistency == Consistency::kAsync;
  float* dst = params_.flat_grads().data<float>();
  Pending* p = nullptr;
  if (!async) {
    p = &pending_[h.clock];
    if (p->grads.empty()) {
      p->grads.resize(workers_);
      p->samples.assign(workers_, -1);  // -1: not pushed
    }
    p->grads[worker].resize(shard_.count);
    dst = p->grads[worker].data();
  }
  try {
    auto buffer =
        context_->createUnboundBuffer(dst, static_cast<size_t>(shard_.count) * sizeof(float));
    buffer->recv(worker, static_cast<uint64_t>(Slot::kGrads));
    if (!buffer->waitRecv(collective::ToChronoMs(options_.timeout))) {
      return absl::AbortedError(
          absl::StrCat("ps: ", me, ": receiving worker ", worker, "'s gradients was aborted"));
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("ps: ", me, ": receiving the gradients of step ",
                                               h.clock, " from worker ", worker,
                                               " failed: ", e.what()));
  }
  ++stats_.pushes;
  RETURN_IF_ERROR(gate_.Finished(worker, h.clock));
  answers_[worker].owed = true;
  if (async) return h.samples > 0 ? Apply(dst, h.samples) : absl::OkStatus();
  p->samples[worker] = h.samples;
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
    pending_.erase(pending_.begin());
    if (samples > 0) RETURN_IF_ERROR(Apply(sum, samples));
  }
  return absl::OkStatus();
}

absl::Status ShardServer::AnswerReady() {
  for (int w = 0; w < workers_; ++w) {
    Answer& a = answers_[w];
    if (!a.owed || !gate_.MayStart(w)) continue;
    RETURN_IF_ERROR(WaitSent(w, a));
    if (a.buffer == nullptr) {
      a.values.resize(shard_.count);
      a.buffer = context_->createUnboundBuffer(a.values.data(),
                                               static_cast<size_t>(shard_.count) * sizeof(float));
    }
    std::memcpy(a.values.data(), values(), static_cast<size_t>(shard_.count) * sizeof(float));
    try {
      a.buffer->send(w, static_cast<uint64_t>(Slot::kParams));
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("ps: ", PsName(workers_, context_->rank),
                                                 ": answering worker ", w, " failed: ", e.what()));
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
    return absl::UnavailableError(absl::StrCat("ps: ", PsName(workers_, context_->rank),
                                               ": worker ", worker,
                                               " never took its parameters: ", e.what()));
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
        t.numel() < shard_.offset + shard_.count) {
      return absl::InvalidArgumentError(
          absl::StrCat("ps: optimizer state '", name, "' (", t.numel(), " values) does not hold ",
                       PsName(workers_, context_->rank), "'s shard of ", shard_.count,
                       " values at ", shard_.offset, " of the optimizer's '", mine[i].first, "'"));
    }
    std::memcpy(mine[i].second.raw(), t.data<float>() + shard_.offset,
                static_cast<size_t>(shard_.count) * sizeof(float));
  }
  optimizer_->set_step_count(steps);
  return absl::OkStatus();
}

absl::Status ShardServer::AskSnapshot(int worker, int64_t clock) {
  if (clock != gate_.Clock(worker) - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps: ", PsName(workers_, context_->rank), " got a snapshot request after step ", clock,
        " from worker ", worker, ", whose last pushed step is ", gate_.Clock(worker) - 1));
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
    try {
      auto buffer = context_->createUnboundBuffer(out.data(), out.size());
      buffer->send(it->worker, static_cast<uint64_t>(Slot::kSnapshot));
      if (!buffer->waitSend(collective::ToChronoMs(options_.timeout))) {
        return absl::AbortedError("ps: sending a snapshot was aborted");
      }
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("ps: ", PsName(workers_, context_->rank),
                                                 ": sending worker ", it->worker,
                                                 " a snapshot failed: ", e.what()));
    }
    ++stats_.snapshots;
    it = snapshots_.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace yoke::ps
