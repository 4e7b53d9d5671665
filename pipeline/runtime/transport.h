// How a pipeline stage's activations and gradients reach its neighbours.
//
// The contract is the one VerifySchedule (pipeline/schedule.h) proves a
// schedule against: a send is posted without waiting for its receiver and
// the caller may reuse its buffer as soon as Send returns; messages are
// matched by (sender, kind, micro-batch), never by arrival order; a receive
// blocks until its message has been posted.
//
// LocalExchange implements it in memory for stages that run as threads of
// one process (the equivalence tests, and ranks a process runs together).
//
// Thread-safety: a Transport is used by its stage's thread only;
// LocalExchange is thread-safe.
#ifndef YOKE_PIPELINE_RUNTIME_TRANSPORT_H_
#define YOKE_PIPELINE_RUNTIME_TRANSPORT_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/tensor.h"

namespace yoke::pipeline {

enum class MessageKind { kActivation, kGradient };

class Transport {
 public:
  virtual ~Transport() = default;
  // Posts t's values to stage `to`.
  virtual absl::Status Send(int to, MessageKind kind, int micro_batch, const engine::Tensor& t) = 0;
  // Waits for the message from stage `from` and copies it into `dst`, whose
  // element count must equal the message's (else INVALID_ARGUMENT naming
  // both). DEADLINE_EXCEEDED naming the message when it does not come in
  // time; the error a failing stage posted (LocalExchange::Abort) if any.
  virtual absl::Status Recv(int from, MessageKind kind, int micro_batch, engine::Tensor* dst) = 0;
};

// Mailboxes for `stages` stages in one process.
class LocalExchange {
 public:
  // `timeout` bounds each receive: a stage that never sends is named
  // instead of hanging the others.
  LocalExchange(int stages, absl::Duration timeout);
  ~LocalExchange();

  // The transport stage s uses (owned by the exchange).
  Transport* For(int stage);

  // Wakes every waiting and later receive with `why` (a stage failed, so
  // its neighbours stop instead of timing out).
  void Abort(const absl::Status& why);

  // Messages posted and not yet received (0 after a whole step).
  int pending() const;
  // The most messages that were ever waiting at once.
  int peak_pending() const;

 private:
  class StageTransport;
  using Key = std::tuple<int, int, int, int>;  // from, to, kind, micro-batch
  absl::Status Post(int from, int to, MessageKind kind, int micro_batch, const engine::Tensor& t);
  absl::Status Take(int from, int to, MessageKind kind, int micro_batch, engine::Tensor* dst);

  const int stages_;
  const absl::Duration timeout_;
  std::vector<std::unique_ptr<StageTransport>> transports_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::vector<float>> mail_;
  absl::Status aborted_;
  int peak_ = 0;
};

// "activation 3 from stage 0 to stage 1"
std::string MessageName(int from, int to, MessageKind kind, int micro_batch);

}  // namespace yoke::pipeline

#endif  // YOKE_PIPELINE_RUNTIME_TRANSPORT_H_
