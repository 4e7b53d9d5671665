// Internal to api/*.cc: the definitions behind the public types' Impl
// pointers (include/yoke/). Not for other callers, and never included by a
// public header.
#ifndef YOKE_API_INTERNAL_H_
#define YOKE_API_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/communicator.h"
#include "collective/reducer.h"
#include "collective/store.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "engine/model.h"
#include "engine/tensor.h"
#include "proto/yoke/v1/job.pb.h"
#include "yoke/data.h"
#include "yoke/distributed.h"
#include "yoke/model.h"
#include "yoke/tensor.h"

namespace yoke {

struct DistributedContext::Impl {
  DistributedOptions options;
  absl::Duration timeout;
  // Declared before the communicator, which uses them until it is destroyed
  // (members are destroyed in reverse order).
  std::unique_ptr<collective::Store> store;
  std::unique_ptr<collective::Store> group_store;  // "data-parallel/" in `store`
  std::unique_ptr<collective::Communicator> comm;  // null for world size 1
  ~Impl();
};

struct Model::Impl {
  std::unique_ptr<engine::Model> model;
  std::vector<int64_t> input_shape;
  int num_classes = 0;
  uint64_t seed = 0;
  bool training = true;
  // The last Forward: its number (Tensor origins refer to it), mode, batch
  // size, layer context, and its input, copied so that Backward does not
  // depend on the caller's buffer.
  int64_t forward_id = 0;
  bool forward_training = false;
  int64_t forward_n = 0;
  engine::LayerContext forward_ctx;
  data::FloatBuffer input;
  // Training-mode Forward calls so far: the dropout masks' step counter.
  int64_t train_forwards = 0;
  // The gradient buffer holds the SUM of per-sample gradients over
  // `grad_count` samples; readers and the optimizer divide by it.
  int64_t grad_count = 0;
  // Attached by DistributedContext::BroadcastParameters. `ctx` keeps the
  // communicator alive for the reducer (declared first: destroyed last).
  std::shared_ptr<DistributedContext::Impl> ctx;
  std::unique_ptr<collective::Reducer> reducer;
  bool step_prepared = false;  // Backward issued buckets; AllreduceGradients finishes

  // Backward from d(sum of the n per-sample losses)/d(logits) of the last
  // Forward.
  absl::Status BackwardSum(const engine::Tensor& dlogits_sum);
};

struct Tensor::Origin {
  std::weak_ptr<Model::Impl> model;
  int64_t forward_id = 0;
};

struct Batch::Impl {
  data::Batch batch;
};

// Converts a public Tensor to an engine tensor that aliases its values.
inline engine::Tensor Wrap(const Tensor& t) {
  return engine::Tensor::Wrap(const_cast<float*>(t.values().data()), t.shape(),
                              engine::DType::kF32);
}

// The model section / data section of YAML text holding (part of) a job spec.
absl::StatusOr<v1::JobSpec> ParseSpecText(const std::string& yaml, const std::string& source);
absl::StatusOr<v1::JobSpec> ParseSpecFile(const std::string& path);

}  // namespace yoke

#endif  // YOKE_API_INTERNAL_H_
