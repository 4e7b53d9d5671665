// InMemoryStore and PrefixStore (store.h).
#include "collective/store.h"

#include "absl/strings/str_cat.h"

namespace yoke::collective {

absl::Status InMemoryStore::Set(absl::string_view key, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  kv_[key] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(absl::string_view key, absl::Duration timeout) {
  const std::string k(key);
  auto present = [this, &k]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return kv_.contains(k); };
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), std::max(timeout, absl::ZeroDuration()))) {
    return absl::DeadlineExceededError(
        absl::StrCat("store: key '", key, "' not set within ", absl::FormatDuration(timeout)));
  }
  return kv_.at(k);
}

absl::Status PrefixStore::Set(absl::string_view key, absl::string_view value) {
  return base_->Set(absl::StrCat(prefix_, key), value);
}

absl::StatusOr<std::string> PrefixStore::Get(absl::string_view key, absl::Duration timeout) {
  return base_->Get(absl::StrCat(prefix_, key), timeout);
}

}  // namespace yoke::collective
