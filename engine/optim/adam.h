// Adam and AdamW with bias correction, as torch.optim.Adam / AdamW:
//   t = step_count + 1
//   adam:  g = grad + wd * p            (L2, coupled)
//   adamw: g = grad; p -= lr * wd * p   (decoupled, before the moment update)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//
// Thread-safety: as Optimizer.
#ifndef YOKE_ENGINE_OPTIM_ADAM_H_
#define YOKE_ENGINE_OPTIM_ADAM_H_

#include "engine/optim/optimizer.h"

namespace yoke::engine {

struct AdamOptions {
  float beta1 = 0.9f;         // in [0, 1)
  float beta2 = 0.999f;       // in [0, 1)
  float epsilon = 1e-8f;      // > 0
  float weight_decay = 0.0f;  // >= 0
  bool decoupled = false;     // true = AdamW
};

class Adam final : public Optimizer {
 public:
  // `params` must be finalized and outlive the optimizer.
  Adam(ParamSet* params, const AdamOptions& options);
  absl::Status AllocateState() override;
  const char* type() const override { return options_.decoupled ? "adamw" : "adam"; }
  using Optimizer::Step;
  absl::Status Step(float lr, float grad_scale) override;
  std::vector<std::pair<std::string, Tensor>> State() const override;

 private:
  AdamOptions options_;
  Tensor m_, v_;  // first and second moments, (padded_size,) each
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_OPTIM_ADAM_H_
