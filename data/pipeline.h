// Pipeline: prepares batches on a background thread while the trainer
// computes.
//
// For each step, in order, the producer thread asks the sampler for this
// rank's indices, gathers the examples from the dataset, transforms them
// (converting bytes to floats, normalising, augmenting when `train`) straight
// into the batch buffer, and queues the batch. For a dataset that decodes
// files (an image folder), the examples of a batch are read and transformed
// on a pool of `decode_threads` threads; an example the dataset skips (a bad
// image under on_bad_image: skip) is left out of its batch, so n shrinks.
// Each example's values do not depend on the thread that built it. At most `prefetch` finished
// batches wait in the queue, so memory stays bounded when the trainer is
// slower. Next() hands them out in step order.
//
// A pipeline covers the steps from (start_epoch, start_step) up to the end of
// epoch end_epoch - 1. Every batch is a pure function of (dataset, sampler
// options, transform, rank, world, epoch, step), so a pipeline started at a
// checkpoint's (epoch, step) yields exactly the batches the interrupted run
// would have produced from there on.
//
// Thread-safety: Next() and Recycle() may be called from one consumer thread
// (or several, serialised by the caller). Destroying the pipeline stops and
// joins the producer promptly, whether or not all batches were consumed.
#ifndef YOKE_DATA_PIPELINE_H_
#define YOKE_DATA_PIPELINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"
#include "data/worker_pool.h"
#include "proto/yoke/v1/job.pb.h"

namespace yoke::data {

struct PipelineOptions {
  // Finished batches kept ready ahead of the consumer; >= 1 (DataSpec.prefetch).
  int prefetch = 2;
  // This replica's global rank and the number of replicas.
  int rank = 0;
  int world_size = 1;
  // First batch: step `start_step` of epoch `start_epoch`. A start_step of
  // steps_per_epoch or more rolls over into the following epochs (a
  // checkpoint taken at the very end of an epoch resumes at the next one).
  int64_t start_epoch = 0;
  int64_t start_step = 0;
  // One past the last epoch; -1 means start_epoch + 1 (a single epoch).
  int64_t end_epoch = -1;
  // Threads that decode a batch when the dataset decodes files (0: this
  // machine's usable cores); ignored for in-memory datasets.
  int decode_threads = 0;
  // Only each batch's indices, labels and sizes: examples are neither read
  // nor transformed, and x stays empty. For a consumer that never reads the
  // inputs (a pipeline's later stages). Refused (INVALID_ARGUMENT) for a
  // dataset that may skip examples, whose batch sizes only reading tells.
  bool labels_only = false;
};

class Pipeline {
 public:
  // Validates the options (INVALID_ARGUMENT naming the field) and the
  // transform against the dataset's example shape, then starts the producer.
  // The transform's augmentation seed is sampler.seed.
  static absl::StatusOr<std::unique_ptr<Pipeline>> Create(std::shared_ptr<const Dataset> dataset,
                                                          const SamplerOptions& sampler,
                                                          const v1::TransformSpec& transform,
                                                          bool train,
                                                          const PipelineOptions& options);

  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // Blocks until the next batch is ready and returns it; returns nullopt once
  // the last step of end_epoch - 1 has been handed out. An error is a
  // dataset's read failure (an image file that cannot be decoded, naming its
  // path); it comes after the batches queued before it, and ends the stream.
  absl::StatusOr<std::optional<Batch>> Next();

  // Optional: gives a consumed batch's buffers back so the producer reuses
  // them instead of allocating (worthwhile for large images).
  void Recycle(Batch&& batch);

  const Sampler& sampler() const { return *sampler_; }
  int64_t steps_per_epoch() const { return sampler_->steps_per_epoch(); }

 private:
  Pipeline(std::shared_ptr<const Dataset> dataset, std::unique_ptr<Sampler> sampler,
           Transform transform, bool train, const PipelineOptions& options);
  void Produce();
  // Fills `b` (whose buffers may be recycled) with (epoch, step).
  absl::Status Build(int64_t epoch, int64_t step, Batch* b);

  bool CanProduce() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || static_cast<int>(queue_.size()) < options_.prefetch;
  }
  bool HasOutput() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || done_; }

  const std::shared_ptr<const Dataset> dataset_;
  const std::unique_ptr<Sampler> sampler_;
  const Transform transform_;
  const bool train_;
  const PipelineOptions options_;  // start normalised: start_step < steps
  // Decoding datasets only; one scratch buffer per worker (producer only).
  std::unique_ptr<WorkerPool> pool_;
  std::vector<std::vector<unsigned char>> scratch_;

  absl::Mutex mu_;
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<Batch> free_ ABSL_GUARDED_BY(mu_);  // recycled buffers
  bool stop_ ABSL_GUARDED_BY(mu_) = false;        // destructor asks to stop
  bool done_ ABSL_GUARDED_BY(mu_) = false;        // producer queued its last batch
  absl::Status error_ ABSL_GUARDED_BY(mu_);       // a read failure ends the stream
  std::thread producer_;
};

}  // namespace yoke::data

#endif  // YOKE_DATA_PIPELINE_H_
