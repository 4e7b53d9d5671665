#include "ps/runtime/ps_client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/gloo_bootstrap.h"
#include "common/status.h"
#include "gloo/context.h"
#include "gloo/transport/unbound_buffer.h"
#include "ps/runtime/links.h"

namespace yoke::ps {
absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(
    std::vector<std::shared_ptr<gloo::Context>> links, int worker, ShardMap map,
    absl::Duration timeout) {
  if (worker < 0 || map.shards.empty() || links.size() != map.shards.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ps: a client needs a worker number >= 0 (got ", worker,
                     "), a shard map and a link per "
                     "shard (",
                     links.size(), " links for ", map.shards.size(), " shards)"));
  }
  for (const auto& l : links) {
    if (l == nullptr || l->size != 2 || l->rank != kLinkWorker) {
      return absl::InvalidArgumentError("ps: a client's links are the worker's side of 2 ranks");
    }
  }
  return std::unique_ptr<PsClient>(new PsClient(std::move(links), worker, std::move(map), timeout));
}

PsClient::PsClient(std::vector<std::shared_ptr<gloo::Context>> links, int worker, ShardMap map,
                   absl::Duration timeout)
    : links_(std::move(links)), worker_(worker), map_(std::move(map)), timeout_(timeout) {}

std::string PsClient::PsOf(size_t i) const {
  return absl::StrCat("PS task ", map_.shards[std::min(i, map_.shards.size() - 1)].ps);
}

PsClient::~PsClient() = default;

absl::Status PsClient::PushPull(const float* grads, float* values, int64_t samples) {
  RETURN_IF_ERROR(BeginStep(grads, values, samples));
  return FinishStep();
}

absl::Status PsClient::Rejoin(float* values) {
  if (left_ || in_step_ || stats_.pushes > 0) {
    return absl::FailedPreconditionError("ps: a worker rejoins before its first step");
  }
  const size_t n = map_.shards.size();
  std::vector<std::vector<char>> answers(n);
  std::vector<Live> live;
  for (size_t i = 0; i < n; ++i) {
    answers[i].resize(sizeof(JoinHead) + static_cast<size_t>(map_.shards[i].count) * sizeof(float));
    live.push_back({links_[i]->createUnboundBuffer(answers[i].data(), answers[i].size()), true});
  }
  ASSIGN_OR_RETURN(const std::vector<gloo::transport::UnboundBuffer*> b, Track(std::move(live)));
  size_t at = 0;
  try {
    for (size_t i = 0; i < n; ++i) b[i]->recv(kLinkPs, static_cast<uint64_t>(Slot::kJoin));
    for (at = 0; at < n; ++at) {
      if (!b[at]->waitRecv(collective::ToChronoMs(timeout_))) {
        left_ = true;
        return absl::AbortedError("ps: rejoining was aborted (a sibling replica failed)");
      }
    }
  } catch (const std::exception& e) {
    left_ = true;
    return absl::UnavailableError(
        absl::StrCat("ps: worker ", worker_, " rejoining ", PsOf(at), " failed: ", e.what()));
  }
  int64_t clock = 0;
  for (size_t i = 0; i < n; ++i) {
    JoinHead head;
    std::memcpy(&head, answers[i].data(), sizeof(head));
    clock = std::max(clock, head.clock);
    rejoined_pushed_ = std::max(rejoined_pushed_, head.pushed);
    std::memcpy(values + map_.shards[i].offset, answers[i].data() + sizeof(JoinHead),
                static_cast<size_t>(map_.shards[i].count) * sizeof(float));
  }
  clock_ = clock;
  step_ = rejoined_pushed_;
  return absl::OkStatus();
}

absl::Status PsClient::StartAt(int64_t first) {
  if (stats_.pushes > 0 || in_step_ || first < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ps: a worker's first data step (", first, ") is set once, >= 0, before its first push"));
  }
  step_ = first;
  return absl::OkStatus();
}

void PsClient::SetParams(const std::vector<std::pair<int64_t, int64_t>>& params) {
  param_shards_.assign(params.size(), {});
  shard_param_floats_.assign(map_.shards.size(), 0);
  for (size_t p = 0; p < params.size(); ++p) {
    const int64_t begin = params[p].first, end = params[p].first + params[p].second;
    for (size_t i = 0; i < map_.shards.size(); ++i) {
      const Shard& sh = map_.shards[i];
      const int64_t overlap = std::min(end, sh.offset + sh.count) - std::max(begin, sh.offset);
      if (overlap <= 0) continue;
      param_shards_[p].push_back({i, overlap});
      shard_param_floats_[i] += overlap;
    }
  }
}

absl::Status PsClient::BeginStep(const float* grads, float* values, int64_t samples) {
  if (left_) return absl::FailedPreconditionError("ps: this worker has left");
  if (in_step_) return absl::FailedPreconditionError("ps: a step is already under way");
  if (samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ps: a push needs samples >= 0, got ", samples));
  }
  const size_t n = map_.shards.size();
  headers_.assign(n, PushHeader{clock_, samples, step_});
  // n answers, then n headers, then n gradient slices.
  std::vector<Live> live;
  for (size_t i = 0; i < n; ++i) {
    const Shard& s = map_.shards[i];
    live.push_back({links_[i]->createUnboundBuffer(values + s.offset,
                                                   static_cast<size_t>(s.count) * sizeof(float)),
                    true});
  }
  for (size_t i = 0; i < n; ++i) {
    live.push_back({links_[i]->createUnboundBuffer(&headers_[i], sizeof(PushHeader)), false});
  }
  for (size_t i = 0; i < n; ++i) {
    const Shard& s = map_.shards[i];
    live.push_back({links_[i]->createUnboundBuffer(const_cast<float*>(grads + s.offset),
                                                   static_cast<size_t>(s.count) * sizeof(float)),
                    false});
  }
  ASSIGN_OR_RETURN(step_buffers_, Track(std::move(live)));
  pushed_.assign(n, false);
  remaining_ = shard_param_floats_;
  remaining_.resize(n, 0);
  step_error_ = absl::OkStatus();
  in_step_ = true;
  return absl::OkStatus();
}

void PsClient::PushShard(size_t i) {
  if (pushed_[i] || !step_error_.ok()) return;
  pushed_[i] = true;
  const size_t n = map_.shards.size();
  try {
    step_buffers_[n + i]->send(kLinkPs, static_cast<uint64_t>(Slot::kHeader));
    step_buffers_[2 * n + i]->send(kLinkPs, static_cast<uint64_t>(Slot::kGrads));
  } catch (const std::exception& e) {
    step_error_ = absl::UnavailableError(absl::StrCat(
        "ps: worker ", worker_, " pushing step ", clock_, " to ", PsOf(i), " failed: ", e.what()));
  }
}

void PsClient::MarkReady(int param) {
  if (!in_step_ || param < 0 || static_cast<size_t>(param) >= param_shards_.size()) return;
  for (const auto& [shard, floats] : param_shards_[param]) {
    remaining_[shard] -= floats;
    if (remaining_[shard] == 0) {
      PushShard(shard);
      ++stats_.early_pushes;
    }
  }
}

absl::Status PsClient::FinishStep() {
  if (!in_step_) return absl::FailedPreconditionError("ps: no step under way");
  in_step_ = false;
  const size_t n = map_.shards.size();
  for (size_t i = 0; i < n; ++i) PushShard(i);
  if (!step_error_.ok()) {
    left_ = true;
    return step_error_;
  }
  const std::vector<gloo::transport::UnboundBuffer*>& b = step_buffers_;
  const auto timeout = collective::ToChronoMs(timeout_);
  size_t at = 0;  // the shard being waited for, for the error
  bool answering = false;
  try {
    // The answers land in the values, which backward read until now: their
    // receives are posted only after it (a PS task's answer waits for them).
    for (size_t i = 0; i < n; ++i) {
      b[i]->recv(kLinkPs, static_cast<uint64_t>(Slot::kParams));
    }
    for (at = 0; at < n; ++at) {
      if (!b[n + at]->waitSend(timeout) || !b[2 * n + at]->waitSend(timeout)) {
        left_ = true;
        return absl::AbortedError("ps: a push was aborted (a sibling replica failed)");
      }
    }
    answering = true;
    const auto t0 = std::chrono::steady_clock::now();
    for (at = 0; at < n; ++at) {
      if (!b[at]->waitRecv(timeout)) {
        left_ = true;
        return absl::AbortedError("ps: a pull was aborted (a sibling replica failed)");
      }
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats_.wait_seconds += waited;
    stats_.longest_wait = std::max(stats_.longest_wait, waited);
  } catch (const std::exception& e) {
    const std::string what = absl::StrCat(
        PsOf(at), answering ? "'s parameters after step " : " to take the push of step ", clock_);
    left_ = true;
    if (collective::IsGlooTimeout(e.what())) {
      return absl::DeadlineExceededError(absl::StrCat("ps: worker ", worker_, " waited ",
                                                      absl::FormatDuration(timeout_), " for ", what,
                                                      " (", e.what(), ")"));
    }
    return absl::UnavailableError(
        absl::StrCat("ps: worker ", worker_, " waiting for ", what, " failed: ", e.what()));
  }
  ++clock_;
  ++step_;
  ++stats_.pushes;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<gloo::transport::UnboundBuffer*>> PsClient::Track(
    std::vector<Live> live) {
  absl::MutexLock l(&mu_);
  if (aborted_) return absl::AbortedError("ps: a sibling replica failed");
  live_ = std::move(live);
  std::vector<gloo::transport::UnboundBuffer*> raw;
  for (const Live& x : live_) raw.push_back(x.buffer.get());
  return raw;
}

void PsClient::Abort() {
  absl::MutexLock l(&mu_);
  aborted_ = true;
  for (const Live& x : live_) {
    if (x.receives) {
      x.buffer->abortWaitRecv();
    } else {
      x.buffer->abortWaitSend();
    }
  }
}

absl::Status PsClient::Snapshot(float* values, const std::vector<float*>& state,
                                int64_t* optimizer_steps) {
  if (left_) return absl::FailedPreconditionError("ps: this worker has left");
  if (in_step_) return absl::FailedPreconditionError("ps: a snapshot needs no step under way");
  const size_t n = map_.shards.size();
  headers_.assign(n, PushHeader{clock_ - 1, kSnapshot});
  std::vector<std::vector<char>> answers(n);
  std::vector<Live> live;
  for (size_t i = 0; i < n; ++i) {
    answers[i].resize(sizeof(SnapshotHead) + static_cast<size_t>(map_.shards[i].count) *
                                                 (1 + state.size()) * sizeof(float));
    live.push_back({links_[i]->createUnboundBuffer(answers[i].data(), answers[i].size()), true});
  }
  for (size_t i = 0; i < n; ++i) {
    live.push_back({links_[i]->createUnboundBuffer(&headers_[i], sizeof(PushHeader)), false});
  }
  ASSIGN_OR_RETURN(const std::vector<gloo::transport::UnboundBuffer*> b, Track(std::move(live)));
  const auto timeout = collective::ToChronoMs(timeout_);
  size_t at = 0;
  try {
    for (size_t i = 0; i < n; ++i) {
      b[i]->recv(kLinkPs, static_cast<uint64_t>(Slot::kSnapshot));
      b[n + i]->send(kLinkPs, static_cast<uint64_t>(Slot::kHeader));
    }
    for (at = 0; at < n; ++at) {
      if (!b[n + at]->waitSend(timeout) || !b[at]->waitRecv(timeout)) {
        left_ = true;
        return absl::AbortedError("ps: a snapshot was aborted (a sibling replica failed)");
      }
    }
  } catch (const std::exception& e) {
    left_ = true;
    return absl::UnavailableError(absl::StrCat("ps: worker ", worker_, " waiting for ", PsOf(at),
                                               "'s snapshot after step ", clock_ - 1,
                                               " failed: ", e.what()));
  }
  for (size_t i = 0; i < n; ++i) {
    const Shard& s = map_.shards[i];
    SnapshotHead head;
    std::memcpy(&head, answers[i].data(), sizeof(head));
    // A PS task with another optimizer would have sent another size, which
    // Gloo refuses; the count is checked all the same.
    if (head.state_arrays != static_cast<int64_t>(state.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("ps: ", PsOf(i), " holds ", head.state_arrays,
                       " optimizer state arrays, this worker's optimizer ", state.size()));
    }
    if (i == 0) *optimizer_steps = head.optimizer_steps;
    const size_t bytes = static_cast<size_t>(s.count) * sizeof(float);
    const char* p = answers[i].data() + sizeof(SnapshotHead);
    std::memcpy(values + s.offset, p, bytes);
    for (size_t k = 0; k < state.size(); ++k) {
      std::memcpy(state[k] + s.offset, p + (k + 1) * bytes, bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status PsClient::Leave() {
  if (left_) return absl::OkStatus();
  left_ = true;
  const size_t n = map_.shards.size();
  headers_.assign(n, PushHeader{kLeave, 0});
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> heads(n);
  try {
    for (size_t i = 0; i < n; ++i) {
      heads[i] = links_[i]->createUnboundBuffer(&headers_[i], sizeof(PushHeader));
      heads[i]->send(kLinkPs, static_cast<uint64_t>(Slot::kHeader));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!heads[i]->waitSend(collective::ToChronoMs(timeout_))) {
        return absl::AbortedError("ps: leaving was aborted");
      }
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("ps: worker ", worker_, " could not tell its PS tasks it left: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace yoke::ps
