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

namespace yoke::ps {
absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(std::shared_ptr<gloo::Context> context,
                                                           int workers, ShardMap map,
                                                           absl::Duration timeout) {
  if (context == nullptr || workers < 1 || context->rank >= workers || map.shards.empty()) {
    return absl::InvalidArgumentError(
        "ps: a client needs a worker's context (a rank below the worker count) and a shard map");
  }
  for (const Shard& s : map.shards) {
    if (PsRank(workers, s.ps) >= context->size) {
      return absl::InvalidArgumentError(absl::StrCat("ps: the shard map names PS task ", s.ps,
                                                     ", but the job has only ",
                                                     context->size - workers));
    }
  }
  return std::unique_ptr<PsClient>(
      new PsClient(std::move(context), workers, std::move(map), timeout));
}

PsClient::PsClient(std::shared_ptr<gloo::Context> context, int workers, ShardMap map,
                   absl::Duration timeout)
    : context_(std::move(context)), workers_(workers), map_(std::move(map)), timeout_(timeout) {}

PsClient::~PsClient() = default;

absl::Status PsClient::PushPull(const float* grads, float* values, int64_t samples) {
  if (left_) return absl::FailedPreconditionError("ps: this worker has left");
  if (samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ps: a push needs samples >= 0, got ", samples));
  }
  const size_t n = map_.shards.size();
  headers_.assign(n, PushHeader{clock_, samples});
  // n answers, then n headers, then n gradient slices.
  std::vector<Live> live;
  for (size_t i = 0; i < n; ++i) {
    const Shard& s = map_.shards[i];
    live.push_back({context_->createUnboundBuffer(values + s.offset,
                                                  static_cast<size_t>(s.count) * sizeof(float)),
                    true});
  }
  for (size_t i = 0; i < n; ++i) {
    live.push_back({context_->createUnboundBuffer(&headers_[i], sizeof(PushHeader)), false});
  }
  for (size_t i = 0; i < n; ++i) {
    const Shard& s = map_.shards[i];
    live.push_back({context_->createUnboundBuffer(const_cast<float*>(grads + s.offset),
                                                  static_cast<size_t>(s.count) * sizeof(float)),
                    false});
  }
  ASSIGN_OR_RETURN(const std::vector<gloo::transport::UnboundBuffer*> b, Track(std::move(live)));
  const auto timeout = collective::ToChronoMs(timeout_);
  size_t at = 0;  // the shard being waited for, for the error
  bool answering = false;
  try {
    for (size_t i = 0; i < n; ++i) {
      const int to = PsRank(workers_, map_.shards[i].ps);
      b[i]->recv(to, static_cast<uint64_t>(Slot::kParams));
      b[n + i]->send(to, static_cast<uint64_t>(Slot::kHeader));
      b[2 * n + i]->send(to, static_cast<uint64_t>(Slot::kGrads));
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
        PsName(workers_, PsRank(workers_, map_.shards[std::min(at, n - 1)].ps)),
        answering ? "'s parameters after step " : " to take the push of step ", clock_);
    left_ = true;
    if (collective::IsGlooTimeout(e.what())) {
      return absl::DeadlineExceededError(absl::StrCat("ps: worker ", context_->rank, " waited ",
                                                      absl::FormatDuration(timeout_), " for ", what,
                                                      " (", e.what(), ")"));
    }
    return absl::UnavailableError(
        absl::StrCat("ps: worker ", context_->rank, " waiting for ", what, " failed: ", e.what()));
  }
  ++clock_;
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
  const size_t n = map_.shards.size();
  headers_.assign(n, PushHeader{clock_ - 1, kSnapshot});
  std::vector<std::vector<char>> answers(n);
  std::vector<Live> live;
  for (size_t i = 0; i < n; ++i) {
    answers[i].resize(sizeof(SnapshotHead) + static_cast<size_t>(map_.shards[i].count) *
                                                 (1 + state.size()) * sizeof(float));
    live.push_back({context_->createUnboundBuffer(answers[i].data(), answers[i].size()), true});
  }
  for (size_t i = 0; i < n; ++i) {
    live.push_back({context_->createUnboundBuffer(&headers_[i], sizeof(PushHeader)), false});
  }
  ASSIGN_OR_RETURN(const std::vector<gloo::transport::UnboundBuffer*> b, Track(std::move(live)));
  const auto timeout = collective::ToChronoMs(timeout_);
  size_t at = 0;
  try {
    for (size_t i = 0; i < n; ++i) {
      const int to = PsRank(workers_, map_.shards[i].ps);
      b[i]->recv(to, static_cast<uint64_t>(Slot::kSnapshot));
      b[n + i]->send(to, static_cast<uint64_t>(Slot::kHeader));
    }
    for (at = 0; at < n; ++at) {
      if (!b[n + at]->waitSend(timeout) || !b[at]->waitRecv(timeout)) {
        left_ = true;
        return absl::AbortedError("ps: a snapshot was aborted (a sibling replica failed)");
      }
    }
  } catch (const std::exception& e) {
    left_ = true;
    const std::string who = PsName(workers_, PsRank(workers_, map_.shards[std::min(at, n - 1)].ps));
    return absl::UnavailableError(absl::StrCat("ps: worker ", context_->rank, " waiting for ", who,
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
      return absl::InvalidArgumentError(absl::StrCat(
          "ps: ", PsName(workers_, PsRank(workers_, s.ps)), " holds ", head.state_arrays,
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
      heads[i] = context_->createUnboundBuffer(&headers_[i], sizeof(PushHeader));
      heads[i]->send(PsRank(workers_, map_.shards[i].ps), static_cast<uint64_t>(Slot::kHeader));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!heads[i]->waitSend(collective::ToChronoMs(timeout_))) {
        return absl::AbortedError("ps: leaving was aborted");
      }
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("ps: worker ", context_->rank,
                                               " could not tell its PS tasks it left: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace yoke::ps
