#include "coordinator/rendezvous.h"

#include "absl/strings/str_cat.h"

namespace yoke::server {
namespace {

constexpr size_t kMaxKey = 1024;
constexpr size_t kMaxValue = 64 << 10;
constexpr size_t kMaxKeys = 1024;
constexpr size_t kMaxNamespaceBytes = 4 << 20;

std::string Name(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

absl::Status NotOpen(const std::string& job_id, int attempt) {
  return absl::FailedPreconditionError(
      absl::StrCat("rendezvous: attempt ", Name(job_id, attempt), " is not running"));
}

}  // namespace

void Rendezvous::Open(const std::string& job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  spaces_.try_emplace({job_id, attempt});
}

void Rendezvous::Close(const std::string& job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  // Waiters re-check their condition on every mutex release, see it gone.
  spaces_.erase({job_id, attempt});
}

absl::Status Rendezvous::Put(const std::string& job_id, int attempt, const std::string& key,
                             std::string value) {
  if (key.empty() || key.size() > kMaxKey) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: must be 1 to ", kMaxKey, " bytes, got ", key.size()));
  }
  if (value.size() > kMaxValue) {
    return absl::InvalidArgumentError(
        absl::StrCat("value: at most ", kMaxValue, " bytes, got ", value.size()));
  }
  absl::MutexLock lock(&mu_);
  auto it = spaces_.find({job_id, attempt});
  if (it == spaces_.end()) return NotOpen(job_id, attempt);
  auto& kv = it->second.kv;
  if (kv.size() >= kMaxKeys && !kv.count(key)) {
    return absl::ResourceExhaustedError(absl::StrCat("rendezvous: attempt ", Name(job_id, attempt),
                                                     " already has ", kMaxKeys, " keys"));
  }
  size_t& bytes = it->second.bytes;
  auto old = kv.find(key);
  const size_t replaced = old == kv.end() ? 0 : key.size() + old->second.size();
  if (bytes - replaced + key.size() + value.size() > kMaxNamespaceBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous: attempt ", Name(job_id, attempt), " would hold more than ",
                     kMaxNamespaceBytes, " bytes of keys and values (holds ", bytes, ")"));
  }
  bytes = bytes - replaced + key.size() + value.size();
  kv[key] = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Rendezvous::Get(const std::string& job_id, int attempt,
                                            const std::string& key, absl::Duration timeout) {
  const NsKey ns{job_id, attempt};
  absl::MutexLock lock(&mu_);
  if (!spaces_.count(ns)) return NotOpen(job_id, attempt);
  // Ready when the key exists or the namespace is gone.
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = spaces_.find(ns);
    return it == spaces_.end() || it->second.kv.count(key) > 0;
  };
  if (timeout > absl::ZeroDuration()) {
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  }
  auto it = spaces_.find(ns);
  if (it == spaces_.end()) {
    return absl::AbortedError(
        absl::StrCat("rendezvous: attempt ", Name(job_id, attempt), " ended while waiting"));
  }
  auto kv = it->second.kv.find(key);
  if (kv == it->second.kv.end()) {
    return absl::DeadlineExceededError(absl::StrCat("rendezvous: key '", key, "' of attempt ",
                                                    Name(job_id, attempt), " not set within ",
                                                    absl::FormatDuration(timeout)));
  }
  return kv->second;
}

int Rendezvous::num_namespaces() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(spaces_.size());
}

}  // namespace yoke::server
