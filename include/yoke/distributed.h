// yoke::DistributedContext: this process's place in a group of ranks that
// train one model together, data-parallel, in a custom loop.
//
// Every rank runs the same loop on its slice of each global batch
// (DataLoaderOptions::rank / world_size). Before the first step,
// BroadcastParameters(model) gives every rank rank 0's parameters and state
// buffers. Each step, after Backward, AllreduceGradients(model) sums the
// gradients over the ranks and divides by the step's total sample count: the
// exact mean over the global batch, however the samples were spread (a short
// last batch, an empty slice). It uses the trainer's gradient reducer
// (Gloo over TCP, gradients in flat buckets; a bucket's allreduce starts
// during Backward as soon as its gradients are final), so the loop trains
// as `yoke train` does with distribution.workers ranks.
//
// Joining. Create() (or FromEnvironment(), for launchers) takes the rank,
// the world size and a rendezvous every rank can reach:
//   file:DIR  a directory all ranks see (one machine, or a shared file
//             system); use a fresh one per launch.
//   coordinator:HOST:PORT
//             a Yoke coordinator's per-attempt rendezvous (the one trainers
//             use), for job_id and attempt; the attempt must be open
//             (scheduled), and TLS and the rendezvous secret come from
//             YOKE_TLS_CA and YOKE_RENDEZVOUS_SECRET as for a trainer.
// A world size of 1 needs none: then BroadcastParameters and
// AllreduceGradients do nothing (the gradient stays the local batch mean).
// Every rank first announces itself and waits for all the others; a rank
// that does not come within the timeout fails the others' Create with
// DEADLINE_EXCEEDED naming it.
//
// Every rank must make the same sequence of collective calls
// (BroadcastParameters, Backward/AllreduceGradients pairs, Barrier); a rank
// that fails or leaves makes the others fail within the timeout, naming it.
//
// Thread-safety: one context per process (or per thread, for tests), used
// from one thread. The models it is attached to keep what they need alive.
#ifndef YOKE_DISTRIBUTED_H_
#define YOKE_DISTRIBUTED_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace yoke {

class Model;

struct DistributedOptions {
  int rank = 0;        // in [0, world_size)
  int world_size = 1;  // >= 1
  // "file:DIR" or "coordinator:HOST:PORT"; required when world_size > 1.
  std::string rendezvous;
  // For a coordinator rendezvous: the job and its attempt.
  std::string job_id;
  int attempt = 0;
  // The address this rank's connections listen on (another machine must be
  // able to reach it).
  std::string hostname = "127.0.0.1";
  // How long to wait for the other ranks to join, and for each collective.
  double timeout_seconds = 300;
  // Gradient buckets (MiB), as distribution.first_bucket_mb / bucket_cap_mb.
  double first_bucket_mb = 1;
  double bucket_cap_mb = 25;
};

class DistributedContext {
 public:
  // INVALID_ARGUMENT for a bad rank, world size or rendezvous string;
  // DEADLINE_EXCEEDED naming the ranks that did not join in time.
  static absl::StatusOr<DistributedContext> Create(const DistributedOptions& options);
  // Options from the environment, as torchrun-style launchers set it:
  //   YOKE_RANK, YOKE_WORLD_SIZE (default 0 and 1), YOKE_RENDEZVOUS,
  //   YOKE_HOSTNAME (default 127.0.0.1), YOKE_TIMEOUT_S (default 300),
  //   and for a coordinator rendezvous YOKE_JOB_ID and YOKE_ATTEMPT.
  // INVALID_ARGUMENT naming the variable for a malformed value.
  static absl::StatusOr<DistributedOptions> OptionsFromEnvironment();
  static absl::StatusOr<DistributedContext> FromEnvironment();

  DistributedContext(DistributedContext&&) noexcept;
  DistributedContext& operator=(DistributedContext&&) noexcept;
  // Leaves the group: waits (up to the timeout) until every peer has
  // finished the last collective, so no rank's exit breaks a peer's.
  ~DistributedContext();

  int rank() const;
  int world_size() const;

  // Copies rank 0's parameters and state buffers to every rank and attaches
  // the model to this context (its gradients are reduced from then on). Call
  // it once per model, before the first step. FAILED_PRECONDITION if the
  // model's parameter layout differs between ranks or it is already
  // attached; a collective's error otherwise.
  absl::Status BroadcastParameters(Model& model);

  // Sums every rank's gradient of the step and makes it the mean over all
  // their samples. Call it on every rank every step, after Backward (a rank
  // with an empty batch calls it without Backward: it contributes nothing).
  // FAILED_PRECONDITION if the model was not attached by
  // BroadcastParameters; a collective's error (naming the ranks that never
  // arrived) otherwise. After an error the group is broken.
  absl::Status AllreduceGradients(Model& model);

  // Waits until every rank has called Barrier.
  absl::Status Barrier();

  struct Impl;  // not part of the API

 private:
  explicit DistributedContext(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace yoke

#endif  // YOKE_DISTRIBUTED_H_
