// Internal to the Trainer's .cc files (trainer.cc, trainer_step.cc,
// trainer_eval.cc, trainer_checkpoint.cc, trainer_report.cc): the definition
// of Trainer::Replica and the small helpers they share. Not for other callers.
#ifndef YOKE_TRAINER_TRAINER_INTERNAL_H_
#define YOKE_TRAINER_TRAINER_INTERNAL_H_

#include <chrono>
#include <memory>

#include "absl/status/status.h"
#include "collective/communicator.h"
#include "collective/reducer.h"
#include "data/pipeline.h"
#include "engine/tensor.h"
#include "trainer/trainer.h"

namespace yoke::worker {
namespace trainer_internal {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

inline engine::Tensor BatchInput(data::Batch& b) {
  return engine::Tensor::Wrap(b.x.data(), b.x_shape(), engine::DType::kF32);
}
inline engine::Tensor BatchLabels(data::Batch& b) {
  return engine::Tensor::Wrap(b.y.data(), {b.n}, engine::DType::kI32);
}

inline collective::Buffer FlatBuffer(const engine::Tensor& t) {
  return collective::Buffer{t.raw(), t.numel(), collective::DataType::kF32,
                            collective::DeviceKind::kCpu, 0};
}

}  // namespace trainer_internal

// One rank: its own model, loss and optimizer, and (when distributed) its
// communicator and reducer. Owned by the Trainer, used by its replica thread.
struct Trainer::Replica {
  int local = 0;  // index among this Trainer's replicas
  int rank = 0;   // global rank
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::Loss> loss;
  std::unique_ptr<engine::Optimizer> optimizer;
  std::unique_ptr<collective::Communicator> comm;  // set under comm_mu_
  std::unique_ptr<collective::Reducer> reducer;
  // Set when distribution.sync_batch_norm: batch_norm's statistics span
  // every replica's samples.
  std::unique_ptr<engine::CrossReplicaSum> sync_stats;
  absl::Status status;  // how RunLoop ended
};

}  // namespace yoke::worker

#endif  // YOKE_TRAINER_TRAINER_INTERNAL_H_
