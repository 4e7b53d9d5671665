// Batch normalization over the channel (last) dimension on the CPU, through
// oneDNN, for one fixed shape (batch size included).
//
// x: (M, C) rows of channels (an (N, H, W, C) image batch is M = N*H*W rows)
//   -> y = gamma * (x - mean) / sqrt(var + eps) + beta.
// Training uses the batch's mean and biased variance, which the plan keeps
// (batch_mean(), batch_var()) for the running-stat update and for Backward.
// Inference, and Backward in eval mode, use the caller's (running) statistics
// as constants.
//
// Thread-safety: a plan belongs to one layer of one replica; not thread-safe.
#ifndef YOKE_ENGINE_KERNELS_CPU_BATCH_NORM_H_
#define YOKE_ENGINE_KERNELS_CPU_BATCH_NORM_H_

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dnnl.hpp"

namespace yoke::engine::cpu {

class BatchNormPlan {
 public:
  // INTERNAL when oneDNN rejects the shape.
  static absl::StatusOr<std::unique_ptr<BatchNormPlan>> Create(int64_t rows, int64_t channels,
                                                               float epsilon);

  // x: (M, C), gamma, beta: (C) -> y: (M, C); the batch statistics land in
  // batch_mean()/batch_var().
  absl::Status ForwardTraining(const float* x, const float* gamma, const float* beta, float* y);
  // x: (M, C), gamma, beta, mean, var: (C) -> y: (M, C).
  absl::Status ForwardInference(const float* x, const float* gamma, const float* beta,
                                const float* mean, const float* var, float* y);
  // x: (M, C), gamma, beta: (C) -> y: (M, C), normalised by the statistics
  // the last ForwardTraining kept, which are not computed again: the same y
  // as that ForwardTraining gave for the same x, at one pass over x instead of
  // the statistics' passes and then the normalising one (a batch norm run
  // again in backward, training.recompute_batch_norm).
  absl::Status ForwardWithBatchStats(const float* x, const float* gamma, const float* beta,
                                     float* y);
  // dy: (M, C), gamma, beta: (C) -> dx: (M, C), dgamma, dbeta: (C), all
  // overwritten. With
  // `global_stats` false, differentiates through the batch statistics of the
  // preceding ForwardTraining (mean/var ignored); with true, treats `mean` and
  // `var` as constants (the eval-mode Forward).
  // (beta is only read because oneDNN's primitive asks for it.)
  absl::Status Backward(const float* x, const float* dy, const float* gamma, const float* beta,
                        bool global_stats, const float* mean, const float* var, float* dx,
                        float* dgamma, float* dbeta);

  // (C) each; valid after ForwardTraining. The variance is the biased one.
  const float* batch_mean() const;
  const float* batch_var() const;

 private:
  BatchNormPlan() = default;
  void Build();

  int64_t rows_ = 0, channels_ = 0;
  float epsilon_ = 0;
  dnnl::batch_normalization_forward fwd_train_, fwd_infer_;
  dnnl::batch_normalization_backward bwd_, bwd_global_;
  // Handles pointed at the caller's buffers per call.
  dnnl::memory x_, y_, dx_, dy_, gamma_, beta_, dgamma_, dbeta_, ext_mean_, ext_var_;
  dnnl::memory mean_, var_;  // owned: the last training batch's statistics
  std::unordered_map<int, dnnl::memory> train_args_, infer_args_, bwd_args_, bwd_global_args_;
};

}  // namespace yoke::engine::cpu

#endif  // YOKE_ENGINE_KERNELS_CPU_BATCH_NORM_H_
