// yoke::Optimizer: SGD (momentum, Nesterov, weight decay), Adam and AdamW
// over a model's parameters, as a job's training.optimizer.
//
//   yoke::SgdOptions sgd;
//   sgd.lr = 0.05f;
//   sgd.momentum = 0.9f;
//   ASSIGN_OR_RETURN(yoke::Optimizer opt, yoke::Optimizer::Sgd(model, sgd));
//   ... loss.Backward(); ctx.AllreduceGradients(model);
//   RETURN_IF_ERROR(opt.Step());
//
// Step() applies the model's current gradient, which is a mean over samples
// (model.h): of the local batch, or of the global batch after
// AllreduceGradients. The learning rate can be changed between steps
// (set_lr) for a schedule of your own.
//
// Thread-safety: as the model.
#ifndef YOKE_OPTIMIZER_H_
#define YOKE_OPTIMIZER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace yoke {

class Model;

struct SgdOptions {
  float lr = 0.01f;           // > 0
  float momentum = 0.0f;      // in [0, 1)
  bool nesterov = false;      // needs momentum > 0
  float weight_decay = 0.0f;  // L2 added to the gradient; >= 0
};

struct AdamOptions {
  float lr = 1e-3f;       // > 0
  float beta1 = 0.9f;     // in [0, 1)
  float beta2 = 0.999f;   // in [0, 1)
  float epsilon = 1e-8f;  // > 0
  // Adam: L2 added to the gradient; AdamW: decoupled decay. >= 0.
  float weight_decay = 0.0f;
};

class Optimizer {
 public:
  // INVALID_ARGUMENT naming the option for an out-of-range value
  // ("sgd: momentum must be in [0, 1), got 1.5").
  static absl::StatusOr<Optimizer> Sgd(Model& model, const SgdOptions& options);
  static absl::StatusOr<Optimizer> Adam(Model& model, const AdamOptions& options);
  static absl::StatusOr<Optimizer> AdamW(Model& model, const AdamOptions& options);

  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;
  ~Optimizer();

  // One update from the model's current gradient.
  absl::Status Step();
  // Sets the model's gradient to zero.
  void ZeroGrad();
  float lr() const;
  // INVALID_ARGUMENT unless finite and >= 0.
  absl::Status set_lr(float lr);
  int64_t step_count() const;

  struct Impl;  // not part of the API

 private:
  explicit Optimizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace yoke

#endif  // YOKE_OPTIMIZER_H_
