// Store: the rendezvous key-value store the ranks of one attempt bootstrap
// their communicators through (rank 0 publishes the ncclUniqueId or the Gloo
// pair addresses; the others wait for them with a deadline).
//
// Implementations:
//   InMemoryStore     one process (tests; threads of one trainer)
//   CoordinatorStore  the coordinator's per-attempt Rendezvous API over gRPC
//                     (coordinator_store.h)
//   PrefixStore       a key namespace inside another store
//   FileStore         a directory shared by the ranks (file_store.h; the C++
//                     API's file:DIR rendezvous)
//
// Keys are written once; a second Set of the same key replaces the value.
// Thread-safety: all implementations are thread-safe.
#ifndef YOKE_COLLECTIVE_STORE_H_
#define YOKE_COLLECTIVE_STORE_H_

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace yoke::collective {

class Store {
 public:
  virtual ~Store() = default;
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;
  // Waits up to `timeout` for `key`; DEADLINE_EXCEEDED (naming the key) if it
  // does not appear. A zero timeout does not wait.
  virtual absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) = 0;
};

class InMemoryStore : public Store {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> kv_ ABSL_GUARDED_BY(mu_);
};

// Prepends `prefix` to every key of `base` (which must outlive it).
class PrefixStore : public Store {
 public:
  PrefixStore(Store* base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {}
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;

 private:
  Store* base_;
  std::string prefix_;
};

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_STORE_H_
