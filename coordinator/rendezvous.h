// Rendezvous: a key-value namespace per (job, attempt), used by an attempt's
// trainers to bootstrap their collectives (rank 0 publishes the NCCL unique
// id or the Gloo store keys; the other ranks wait for them).
//
// A namespace exists only while its attempt runs: the coordinator Open()s it
// when it schedules the attempt and Close()s it when the attempt ends, which
// drops its keys and wakes every waiting Get with ABORTED. Put and Get on a
// namespace that is not open fail with FAILED_PRECONDITION, so a trainer of
// a stale attempt can never meet the ranks of a newer one.
//
// Limits (a rendezvous carries ids and addresses, not data): keys up to
// 1 KiB, values up to 64 KiB, and per namespace 1,024 keys and 4 MiB of keys
// and values in all; beyond them Put fails with INVALID_ARGUMENT /
// RESOURCE_EXHAUSTED. A Gloo rank's address list is about 140 bytes per peer,
// so 64 KiB values cap a job at about 450 ranks.
//
// Thread-safety: every method may be called from any thread; Get blocks the
// calling thread (a gRPC handler thread) for at most its timeout.
#ifndef YOKE_COORDINATOR_RENDEZVOUS_H_
#define YOKE_COORDINATOR_RENDEZVOUS_H_

#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace yoke::server {

class Rendezvous {
 public:
  // Creates the namespace of (job_id, attempt); no effect if it exists.
  void Open(const std::string& job_id, int attempt);
  // Drops the namespace and its keys; waiting Gets return ABORTED.
  void Close(const std::string& job_id, int attempt);

  // Sets `key` (overwriting) and wakes the Gets waiting for it.
  absl::Status Put(const std::string& job_id, int attempt, const std::string& key,
                   std::string value);

  // Returns the value of `key`, waiting up to `timeout` for it to appear
  // (zero: do not wait). DEADLINE_EXCEEDED naming the key if it did not.
  absl::StatusOr<std::string> Get(const std::string& job_id, int attempt, const std::string& key,
                                  absl::Duration timeout);

  // Open namespaces (for tests and metrics).
  int num_namespaces() const;

 private:
  using NsKey = std::pair<std::string, int>;
  struct Namespace {
    std::map<std::string, std::string> kv;
    size_t bytes = 0;  // sum of the sizes of kv's keys and values
  };
  mutable absl::Mutex mu_;
  std::map<NsKey, Namespace> spaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace yoke::server

#endif  // YOKE_COORDINATOR_RENDEZVOUS_H_
