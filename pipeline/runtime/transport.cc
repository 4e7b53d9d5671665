#include "pipeline/runtime/transport.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace yoke::pipeline {

std::string MessageName(int from, int to, MessageKind kind, int micro_batch) {
  return absl::StrCat(kind == MessageKind::kActivation ? "activation " : "gradient ", micro_batch,
                      " from stage ", from, " to stage ", to);
}

class LocalExchange::StageTransport final : public Transport {
 public:
  StageTransport(LocalExchange* ex, int stage) : ex_(ex), stage_(stage) {}
  absl::Status Send(int to, MessageKind kind, int micro_batch, const engine::Tensor& t) override {
    return ex_->Post(stage_, to, kind, micro_batch, t);
  }
  absl::Status Recv(int from, MessageKind kind, int micro_batch, engine::Tensor* dst) override {
    return ex_->Take(from, stage_, kind, micro_batch, dst);
  }

 private:
  LocalExchange* ex_;
  int stage_;
};

LocalExchange::LocalExchange(int stages, absl::Duration timeout)
    : stages_(stages), timeout_(timeout) {
  for (int s = 0; s < stages; ++s) transports_.push_back(std::make_unique<StageTransport>(this, s));
}

LocalExchange::~LocalExchange() = default;

Transport* LocalExchange::For(int stage) { return transports_[stage].get(); }

void LocalExchange::Abort(const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.ok()) aborted_ = why;
  }
  cv_.notify_all();
}

int LocalExchange::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(mail_.size());
}

int LocalExchange::peak_pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

absl::Status LocalExchange::Post(int from, int to, MessageKind kind, int micro_batch,
                                 const engine::Tensor& t) {
  if (to < 0 || to >= stages_ || std::abs(to - from) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline: stage ", from,
                                                   " may only send to a neighbour, not to stage ",
                                                   to, " of ", stages_));
  }
  std::vector<float> values(t.data<float>(), t.data<float>() + t.numel());
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Key key{from, to, static_cast<int>(kind), micro_batch};
    if (mail_.count(key) > 0) {
      return absl::InternalError(
          absl::StrCat("pipeline: ", MessageName(from, to, kind, micro_batch),
                       " was sent twice before it was received"));
    }
    mail_.emplace(key, std::move(values));
    peak_ = std::max(peak_, static_cast<int>(mail_.size()));
  }
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status LocalExchange::Take(int from, int to, MessageKind kind, int micro_batch,
                                 engine::Tensor* dst) {
  const Key key{from, to, static_cast<int>(kind), micro_batch};
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout_);
  while (mail_.count(key) == 0 && aborted_.ok()) {
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && mail_.count(key) == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("pipeline: stage ", to, " waited ", absl::FormatDuration(timeout_), " for ",
                       MessageName(from, to, kind, micro_batch), ", which never came"));
    }
  }
  if (mail_.count(key) == 0) return aborted_;
  auto it = mail_.find(key);
  if (static_cast<int64_t>(it->second.size()) != dst->numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline: ", MessageName(from, to, kind, micro_batch), " holds ",
                     it->second.size(), " values; the receiver expects ", dst->numel()));
  }
  std::memcpy(dst->data<float>(), it->second.data(), it->second.size() * sizeof(float));
  mail_.erase(it);
  return absl::OkStatus();
}

}  // namespace yoke::pipeline
