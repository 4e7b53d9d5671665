// EstimateReplicaMemory: a lower bound on the memory one replica of a job
// needs, from its spec alone, so the coordinator can refuse at submit a job
// that no worker could ever hold (a dense layer of 10^9 units) instead of
// letting its trainers fail, or exhaust a worker, after scheduling.
//
// Where the spec fixes the input's shape (synthetic and csv data by
// `shape`, cifar10 by its format, an image_folder by its resize or crop and
// channels, an idx file by the header the caller read), every layer's shape
// is resolved exactly by the engine's shape rules (engine/shapes/).
// Elsewhere (an idx file the caller cannot see), every size the spec leaves
// open is taken as 1: an
// image's height, width and channels before the first layer that fixes
// them. What is counted:
//   parameters, their gradients and the optimizer's state (sgd with momentum
//   and adam(w) keep 1 and 2 more copies), 4 bytes each (fp32);
//   each layer's output for the replica's share of the batch, kept for the
//   backward pass, but not the outputs the CPU engine's fusions never
//   allocate (a ReLU its convolution, batch norm or residual add applies; a
//   first convolution that writes its 2x2 max pool's output,
//   engine/model.h);
//   the largest gradient of a layer that needs one (the engine shares the
//   activation gradients by liveness, engine/memory_plan.h, and gives none
//   to layers before the first one with parameters).
// The true need is at least this, so a refusal is never wrong: a test
// (tests/memory_estimate_bound_test.cc) trains each zoo model a step in the
// engine and checks that the memory it holds is at least this count. A job
// that passes may still not fit, and fails in its trainer with a message
// saying how much memory it needed.
//
// With training.recompute the engine keeps only the outputs between the
// model's blocks and pools the rest; those kept outputs and the largest
// pooled one are counted instead of every output.
//
// A pipeline job's replica holds one stage (distribution.pipeline): its
// layers' parameters, and their activations for one micro-batch (the batch
// over the pipelines and micro-batches). At explicit boundaries the largest
// stage is counted; where the trainer picks the split, the larger of an even
// share of the layers and the largest layer.
//
// Zoo models are expanded into their layers by the engine's own zoo code
// (engine/zoo/), for the smallest input the spec allows, and counted the
// same way. The data pipeline adds the sampler's permutation of a synthetic
// training set (8 bytes an example).
//
// Thread-safety: a pure function.
#ifndef YOKE_JOBSPEC_MEMORY_ESTIMATE_H_
#define YOKE_JOBSPEC_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/yoke/v1/job.pb.h"

namespace yoke::common {

struct MemoryEstimate {
  double bytes = 0;           // the lower bound for one replica
  std::string largest_layer;  // the layer that contributes most ("" if none)
  double largest_layer_bytes = 0;
  double data_bytes = 0;  // the data pipeline's share of `bytes`
  int stages = 1;         // a pipeline job's: `bytes` is its largest stage's
  double parameters = 0;  // the whole model's parameters (floats)
};

// `idx_shape`: for an idx training set, the shape of one example as its
// images file's header gives it ({rows, cols, 1}, data/listing/idx_shape.h),
// where the caller can read the file; empty, the input is taken as 1x1x1.
MemoryEstimate EstimateReplicaMemory(const v1::JobSpec& spec,
                                     const std::vector<int64_t>& idx_shape = {});

// A parameter-server job's PS task (docs/parameter_servers.md): a lower
// bound on what one holds, from the replica estimate's parameter count.
//   (no model: the task copies its shard's first values from its
//   process's replica, and the copy goes once its server holds them);
//   its shard, the largest of the job's ShardMap (ps/shard_map.h), as
//   values, gradients and the optimizer's copies;
//   under sync and bounded, one step's pushes held until the step is
//   complete, from every worker but the last; under async none (a push is
//   applied where it lands);
//   an answer buffer of the shard per worker.
// 0 for a job that is not a parameter-server job. The coordinator compares
// it, as a replica's, with one rank's share of a worker's memory.
double EstimatePsTaskMemory(const v1::JobSpec& spec, const MemoryEstimate& replica);

// "3.2 GiB", "512 MiB": for messages.
std::string FormatBytes(double bytes);

}  // namespace yoke::common

#endif  // YOKE_JOBSPEC_MEMORY_ESTIMATE_H_
