// SGD with optional momentum, Nesterov momentum and L2 weight decay, with
// PyTorch's torch.optim.SGD semantics (dampening 0):
//   g = grad + wd * p
//   v = momentum * v + g          (v starts at 0, so v = g on the first step,
//                                  exactly torch's "buf = g at step 1")
//   p -= lr * (nesterov ? g + momentum * v : v)
// momentum == 0 is plain SGD and keeps no state.
//
// Thread-safety: as Optimizer.
#ifndef YOKE_ENGINE_OPTIM_SGD_H_
#define YOKE_ENGINE_OPTIM_SGD_H_

#include "engine/optim/optimizer.h"

namespace yoke::engine {

struct SgdOptions {
  float momentum = 0.0f;      // >= 0; 0 = plain SGD
  bool nesterov = false;      // with momentum 0, plain SGD (validation refuses that)
  float weight_decay = 0.0f;  // >= 0; L2 term added to the gradient
};

// The fused update over n elements: p, g, v: (n,), with gradient
// grad_scale * g. `v` may be null when momentum == 0. This is the CPU
// reference the CUDA kernel is tested against.
void SgdUpdate(const SgdOptions& o, float lr, float* p, const float* g, float* v, int64_t n,
               float grad_scale = 1.0f);

class Sgd final : public Optimizer {
 public:
  // `params` must be finalized and outlive the optimizer.
  Sgd(ParamSet* params, const SgdOptions& options);
  absl::Status AllocateState() override;
  const char* type() const override { return "sgd"; }
  using Optimizer::Step;
  absl::Status Step(float lr, float grad_scale) override;
  std::vector<std::pair<std::string, Tensor>> State() const override;

 private:
  SgdOptions options_;
  Tensor velocity_;  // (padded_size,), defined only when momentum > 0
};

}  // namespace yoke::engine

#endif  // YOKE_ENGINE_OPTIM_SGD_H_
