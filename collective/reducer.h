// Reducer: sums one replica's gradients with every other rank's, in flat
// buckets that start while backward is still running.
//
// The reducer sees the gradients as one flat buffer plus the parameters'
// ranges in it, in declaration order (collective/ knows nothing about
// layers). Backward produces gradients roughly in REVERSE declaration order,
// so the parameters are grouped into buckets in that order: bucket 0 holds
// the last-declared parameters (the first gradients to be final) and is
// small (first_bucket_bytes, so communication starts early); later buckets
// are up to bucket_bytes. A bucket is the contiguous range of the flat
// buffer from its lowest parameter's offset to the end of its highest one
// (alignment padding between entries holds zeros and rides along), so
// buckets are reduced in place, without copies. Every rank derives the same
// buckets from the same ranges, and issues them in bucket order.
//
// A step:
//   Prepare(count, stop)   issues the allreduce of the step's sample count
//                          (and of a stop vote, so all ranks stop together)
//   MarkReady(i) ...       as backward finishes each parameter's gradient;
//                          when bucket k's parameters are all ready (and
//                          buckets 0..k-1 have been issued) its allreduce
//                          starts at once, tagged "bucket k"
//   Finish()               issues what is left, waits for everything and
//                          returns the global sample count and stop votes
// After Finish() the buffer holds the SUM over ranks of the local gradients.
// The caller divides by the returned count (the Trainer folds 1/count into
// the optimizer step as a gradient scale, which costs no extra pass over the
// gradients). With each rank's local gradient d(sum of its per-sample
// losses)/dθ, that is the exact mean over the samples of the global step,
// however unevenly they were spread over the ranks.
//
// Devices: the sample count travels in host memory (an i64 pair), so the
// reducer serves CPU buffers (Gloo) today; over NCCL the count would need a
// device-side buffer.
//
// Errors: a failed or timed-out collective fails Finish() with the
// communicator's status (it names the op, its sequence number, the bucket
// tag and the ranks that never arrived). After an error the communicator is
// broken and the reducer is unusable.
//
// Thread-safety: a Reducer belongs to one rank's replica thread, like its
// Communicator; not thread-safe.
#ifndef YOKE_COLLECTIVE_REDUCER_H_
#define YOKE_COLLECTIVE_REDUCER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/communicator.h"

namespace yoke::collective {

struct ReducerOptions {
  // Size cap of bucket 0 (the last-declared parameters): small, so the first
  // allreduce starts soon after backward begins.
  int64_t first_bucket_bytes = int64_t{1} << 20;
  // Size cap of the other buckets. A bucket closes once it reaches its cap;
  // a single parameter larger than the cap gets a bucket of its own.
  int64_t bucket_bytes = int64_t{25} << 20;
  // kF16/kBF16: gradients travel compressed (AllreduceOptions::wire).
  DataType wire = DataType::kF32;
  // Per-collective timeout.
  absl::Duration timeout = absl::Minutes(5);
};

// What Finish() returns: sums over all ranks.
struct StepTotals {
  int64_t samples = 0;     // of Prepare's local_count
  int64_t stop_votes = 0;  // of Prepare's stop_vote
  // From the first gradient bucket issued to the last one done (0 when the
  // step had none): the allreduce time, hidden or not.
  double comm_seconds = 0;
};

// One parameter's gradient: `count` elements from element `offset` of the
// flat buffer.
struct ParamRange {
  int64_t offset = 0;
  int64_t count = 0;
};

class Reducer {
 public:
  struct Bucket {
    int64_t offset = 0;       // elements into the flat buffer
    int64_t count = 0;        // elements, padding included
    std::vector<int> params;  // parameter indices, in reverse declaration order
  };

  // `comm` must outlive the reducer; `grads` is the kF32 flat gradient
  // buffer; `params` the ranges in declaration order, with increasing,
  // non-overlapping offsets inside `grads`. INVALID_ARGUMENT otherwise (or
  // for non-positive bucket caps, or a wire type other than kF32/kF16/kBF16).
  static absl::StatusOr<std::unique_ptr<Reducer>> Create(Communicator* comm, Buffer grads,
                                                         std::vector<ParamRange> params,
                                                         const ReducerOptions& options);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  Communicator* communicator() const { return comm_; }

  // Starts a step: this rank contributes `local_count` samples (>= 0) and
  // `stop_vote` (e.g. 1 when this rank was asked to stop). FAILED_PRECONDITION
  // if the previous step was not finished.
  absl::Status Prepare(int64_t local_count, int64_t stop_vote = 0);

  // Parameter `param`'s gradient is final for this step. Out-of-range or
  // repeated indices are recorded and fail Finish() (INVALID_ARGUMENT).
  void MarkReady(int param);

  // Treats every parameter not yet marked as ready, waits for all of the
  // step's collectives and returns the sums of every rank's local_count and
  // stop_vote. On error, the first failure's status.
  absl::StatusOr<StepTotals> Finish();

 private:
  Reducer(Communicator* comm, Buffer grads, const ReducerOptions& options)
      : comm_(comm), grads_(grads), options_(options) {}
  // Issues every complete bucket from next_bucket_ on, in order.
  void IssueReady();

  Communicator* comm_;
  Buffer grads_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;  // parameter index -> bucket

  // Per step.
  bool in_step_ = false;
  int64_t totals_[2] = {0, 0};  // allreduced in place: samples, stop votes
  std::unique_ptr<Work> count_work_;
  std::vector<char> ready_;   // per parameter
  std::vector<int> pending_;  // per bucket: parameters not yet ready
  int next_bucket_ = 0;
  std::vector<std::unique_ptr<Work>> works_;
  absl::Time first_issue_;  // of the step's first gradient bucket
  absl::Status error_;
};

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_REDUCER_H_
