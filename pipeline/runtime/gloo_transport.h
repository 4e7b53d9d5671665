// GlooTransport: a pipeline stage's messages over Gloo's TCP pairs, for
// stages in different processes or on different hosts.
//
// Each stage is one rank of a Gloo context bootstrapped through a Store
// (collective/gloo_bootstrap.h: the data-plane port range, and errors that
// name the unreachable peer). A message is one unbound-buffer send whose
// slot encodes its kind and micro-batch, so the receiver matches it by
// (sender, kind, micro-batch) as Transport requires, and Gloo keeps the
// messages of one slot in order from step to step. Send copies the tensor
// into a buffer of the transport's own and returns without waiting for the
// receiver (Gloo completes the send once the receiver posts its receive);
// the buffer is reused, after its send has completed, by the same message
// of a later step. The destructor waits for sends still in flight, up to
// the timeout.
//
// Thread-safety: one stage's thread.
#ifndef YOKE_PIPELINE_RUNTIME_GLOO_TRANSPORT_H_
#define YOKE_PIPELINE_RUNTIME_GLOO_TRANSPORT_H_

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/gloo_communicator.h"
#include "collective/store.h"
#include "pipeline/runtime/transport.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace yoke::pipeline {

class GlooTransport final : public Transport {
 public:
  // Connects stage `stage` of `stages` through `store` (shared by every
  // stage of the pipeline, and outliving the transport). `timeout` bounds
  // each receive and the final wait for sends.
  static absl::StatusOr<std::unique_ptr<GlooTransport>> Create(
      collective::Store* store, int stage, int stages, const collective::GlooOptions& options,
      absl::Duration timeout);
  ~GlooTransport() override;

  absl::Status Send(int to, MessageKind kind, int micro_batch, const engine::Tensor& t) override;
  absl::Status Recv(int from, MessageKind kind, int micro_batch, engine::Tensor* dst) override;

 private:
  GlooTransport(std::shared_ptr<gloo::Context> context, int stage, absl::Duration timeout);
  struct Outgoing {
    std::vector<float> values;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    bool in_flight = false;
  };
  // A receive's buffer over its destination, kept for the next step's.
  struct Incoming {
    const float* data = nullptr;
    size_t bytes = 0;
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  };
  using Key = std::tuple<int, int, int>;  // to (or from), kind, micro-batch
  // Waits for `o`'s send to complete: DEADLINE_EXCEEDED or the Gloo error.
  absl::Status WaitSent(const Key& key, Outgoing& o);

  std::shared_ptr<gloo::Context> context_;
  int stage_;
  absl::Duration timeout_;
  std::map<Key, Outgoing> out_;
  std::map<Key, Incoming> in_;
};

}  // namespace yoke::pipeline

#endif  // YOKE_PIPELINE_RUNTIME_GLOO_TRANSPORT_H_
