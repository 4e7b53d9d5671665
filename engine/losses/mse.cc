#include "engine/losses/mse.h"

#include "absl/strings/str_cat.h"

namespace yoke::engine {

absl::StatusOr<LossResult> MeanSquaredError::Compute(const Tensor& logits, const Tensor& labels,
                                                     float grad_scale, Tensor* dlogits) {
  const int64_t n = logits.dim(0), k = logits.dim(1);
  const float* z = logits.data<float>();
  const int32_t* y = labels.data<int32_t>();
  float* dz = dlogits ? dlogits->data<float>() : nullptr;
  const float dscale = grad_scale * 2.0f / static_cast<float>(k);
  LossResult r;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] < 0 || y[i] >= k) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", y[i], " of example ", i, " is outside [0, ", k, ")"));
    }
    const float* row = z + i * k;
    int64_t arg = 0;
    double sq = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      if (row[j] > row[arg]) arg = j;
      const double d = static_cast<double>(row[j]) - (j == y[i] ? 1.0 : 0.0);
      sq += d * d;
    }
    r.loss_sum += sq / static_cast<double>(k);
    if (arg == y[i]) ++r.correct;
    if (dz != nullptr) {
      float* drow = dz + i * k;
      for (int64_t j = 0; j < k; ++j) {
        drow[j] = dscale * (row[j] - (j == y[i] ? 1.0f : 0.0f));
      }
    }
  }
  return r;
}

}  // namespace yoke::engine
