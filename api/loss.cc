// yoke::Loss (include/yoke/loss.h): engine's softmax cross-entropy, and
// backward through the model that produced the logits.
#include "engine/losses/loss.h"

#include "absl/strings/str_cat.h"
#include "api/internal.h"
#include "common/status.h"
#include "yoke/loss.h"

namespace yoke {

struct Loss::Impl {
  engine::LossResult result;
  int64_t n = 0;
  Tensor grad;                  // d(mean)/d(logits)
  std::vector<float> grad_sum;  // d(sum)/d(logits), what backward takes
  std::vector<int64_t> shape;
  std::shared_ptr<const Tensor::Origin> origin;
};

Loss::Loss() : impl_(std::make_unique<Impl>()) {}
Loss::~Loss() = default;
Loss::Loss(Loss&&) noexcept = default;
Loss& Loss::operator=(Loss&&) noexcept = default;

double Loss::value() const {
  return impl_->n > 0 ? impl_->result.loss_sum / static_cast<double>(impl_->n) : 0.0;
}
double Loss::sum() const { return impl_->result.loss_sum; }
int64_t Loss::count() const { return impl_->n; }
int64_t Loss::correct() const { return impl_->result.correct; }
const Tensor& Loss::grad() const { return impl_->grad; }

absl::Status Loss::Backward() {
  const auto& origin = impl_->origin;
  if (!origin) {
    return absl::FailedPreconditionError(
        "Loss::Backward: the logits did not come from Model::Forward, so there is no model to "
        "backpropagate through (use Model::Backward(dlogits) with your own tensor)");
  }
  std::shared_ptr<Model::Impl> model = origin->model.lock();
  if (!model) return absl::FailedPreconditionError("Loss::Backward: the model was destroyed");
  if (model->forward_id != origin->forward_id) {
    return absl::FailedPreconditionError(
        "Loss::Backward: the model has run Forward again since these logits were computed; "
        "call Backward before the next Forward");
  }
  return model->BackwardSum(engine::Tensor::Wrap(impl_->grad_sum.data(), impl_->shape));
}

absl::StatusOr<Loss> CrossEntropyLoss(const Tensor& logits, const std::vector<int32_t>& labels) {
  const auto& s = logits.shape();
  if (s.size() != 2 || s[0] * s[1] != logits.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CrossEntropyLoss: logits must be (n, K), got ", data::ShapeToString(s)));
  }
  if (s[0] != static_cast<int64_t>(labels.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("CrossEntropyLoss: ", s[0], " rows of logits but ", labels.size(), " labels"));
  }
  ASSIGN_OR_RETURN(auto fn, engine::CreateLoss("softmax_cross_entropy"));
  Loss loss;
  Loss::Impl& l = *loss.impl_;
  l.n = s[0];
  l.shape = s;
  l.origin = logits.origin();
  l.grad_sum.resize(logits.numel());
  engine::Tensor dlogits = engine::Tensor::Wrap(l.grad_sum.data(), s);
  ASSIGN_OR_RETURN(l.result, fn->Compute(Wrap(logits),
                                         engine::Tensor::Wrap(const_cast<int32_t*>(labels.data()),
                                                              {s[0]}, engine::DType::kI32),
                                         1.0f, &dlogits));
  std::vector<float> mean(l.grad_sum);
  const float inv = l.n > 0 ? 1.0f / static_cast<float>(l.n) : 0.0f;
  for (float& v : mean) v *= inv;
  ASSIGN_OR_RETURN(l.grad, Tensor::Create(s, std::move(mean)));
  return loss;
}

absl::StatusOr<Loss> CrossEntropyLoss(const Tensor& logits, const Batch& batch) {
  if (batch.impl() == nullptr) return absl::InvalidArgumentError("CrossEntropyLoss: empty batch");
  return CrossEntropyLoss(logits, batch.impl()->batch.y);
}

}  // namespace yoke
