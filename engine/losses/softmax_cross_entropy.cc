#include "engine/losses/softmax_cross_entropy.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace yoke::engine {

absl::StatusOr<LossResult> SoftmaxCrossEntropy::Compute(const Tensor& logits, const Tensor& labels,
                                                        float grad_scale, Tensor* dlogits) {
  const int64_t n = logits.dim(0), k = logits.dim(1);
  const float* z = logits.data<float>();
  const int32_t* y = labels.data<int32_t>();
  float* dz = dlogits ? dlogits->data<float>() : nullptr;
  // Target weights: `off` for every class, `on` for the label.
  const double off = static_cast<double>(label_smoothing_) / static_cast<double>(k);
  const double on = 1.0 - static_cast<double>(label_smoothing_) + off;
  LossResult r;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] < 0 || y[i] >= k) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", y[i], " of example ", i, " is outside [0, ", k, ")"));
    }
    const float* row = z + i * k;
    float mx = row[0];
    int64_t arg = 0;
    for (int64_t j = 1; j < k; ++j) {
      if (row[j] > mx) {
        mx = row[j];
        arg = j;
      }
    }
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
    double log_sum = std::log(sum);
    // -sum_j t_j (z_j - mx - log_sum) = log_sum - sum_j t_j (z_j - mx), as
    // the t_j sum to 1.
    if (label_smoothing_ == 0.0f) {
      r.loss_sum += log_sum - (row[y[i]] - mx);
    } else {
      double dot = 0.0;
      for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(row[j] - mx);
      dot = off * dot + (on - off) * static_cast<double>(row[y[i]] - mx);
      r.loss_sum += log_sum - dot;
    }
    if (arg == y[i]) ++r.correct;
    if (dz != nullptr) {
      float* drow = dz + i * k;
      for (int64_t j = 0; j < k; ++j) {
        float p = static_cast<float>(std::exp(static_cast<double>(row[j] - mx) - log_sum));
        const float t = label_smoothing_ == 0.0f ? (j == y[i] ? 1.0f : 0.0f)
                                                 : static_cast<float>(j == y[i] ? on : off);
        drow[j] = grad_scale * (p - t);
      }
    }
  }
  return r;
}

}  // namespace yoke::engine
