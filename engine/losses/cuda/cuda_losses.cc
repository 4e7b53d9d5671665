#include "engine/losses/cuda/cuda_losses.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/kernels/cuda/cuda_check.h"
#include "engine/kernels/cuda/device_context.h"
#include "engine/kernels/cuda/loss_kernels.h"
#include "engine/kernels/cuda/math/loss.h"

namespace yoke::engine::cuda {
namespace {

// logits (N, K) f32, labels (N) i32 and dlogits (N, K) f32, all on `index`.
absl::Status CheckOperands(const char* loss, const Tensor& z, const Tensor& y, const Tensor* dz,
                           int index) {
  const Device dev = Device::CUDA(index);
  const bool ok = z.rank() == 2 && z.dtype() == DType::kF32 && z.device() == dev && y.rank() == 1 &&
                  y.dtype() == DType::kI32 && y.device() == dev && y.dim(0) == z.dim(0) &&
                  z.dim(1) > 0 &&
                  (dz == nullptr ||
                   (dz->shape() == z.shape() && dz->dtype() == DType::kF32 && dz->device() == dev));
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      loss, " on cuda:", index,
      ": expects logits (N, K) f32, labels (N) i32 and dlogits like the logits, all on that "
      "device; got logits (",
      absl::StrJoin(z.shape(), ", "), ") on ", z.device().ToString(), ", labels (",
      absl::StrJoin(y.shape(), ", "), ") on ", y.device().ToString()));
}

// The per-row scratch of a loss and where the totals land (device memory).
struct Scratch {
  double* row_loss;
  int32_t* row_flag;
  LossTotals* totals;
};

absl::StatusOr<Scratch> MakeScratch(DeviceContext* ctx, int64_t rows) {
  // Totals first (8-byte aligned), then the doubles, then the flags.
  const size_t bytes = sizeof(LossTotals) + rows * (sizeof(double) + sizeof(int32_t));
  ASSIGN_OR_RETURN(void* p, ctx->Workspace(bytes, "loss scratch"));
  char* c = static_cast<char*>(p);
  Scratch s;
  s.totals = reinterpret_cast<LossTotals*>(c);
  s.row_loss = reinterpret_cast<double*>(c + sizeof(LossTotals));
  s.row_flag = reinterpret_cast<int32_t*>(c + sizeof(LossTotals) + rows * sizeof(double));
  return s;
}

// Copies the totals to the host (the step's one wait) and turns a bad label
// into the CPU loss's error.
absl::StatusOr<LossResult> ReadTotals(DeviceContext* ctx, const Scratch& s, int64_t k) {
  ASSIGN_OR_RETURN(void* pinned, ctx->PinnedScratch(sizeof(LossTotals)));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(pinned, s.totals, sizeof(LossTotals), cudaMemcpyDeviceToHost, ctx->stream()));
  RETURN_IF_ERROR(ctx->Synchronize());
  const LossTotals t = *static_cast<const LossTotals*>(pinned);
  if (t.bad_row >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("label ", t.bad_label, " of example ", t.bad_row, " is outside [0, ", k, ")"));
  }
  LossResult r;
  r.loss_sum = t.loss_sum;
  r.correct = t.correct;
  return r;
}

// The shared frame of both losses; Launch enqueues the loss's kernels.
class CudaLoss : public Loss {
 public:
  explicit CudaLoss(int index) : index_(index) {}
  absl::StatusOr<LossResult> Compute(const Tensor& logits, const Tensor& labels, float grad_scale,
                                     Tensor* dlogits) override {
    RETURN_IF_ERROR(CheckOperands(name(), logits, labels, dlogits, index_));
    const int64_t rows = logits.dim(0);
    if (rows == 0) return LossResult{};
    ASSIGN_OR_RETURN(DeviceContext * ctx, ContextFor(index_));
    ASSIGN_OR_RETURN(Scratch s, MakeScratch(ctx, rows));
    const LossTotalsFn totals{s.row_loss, s.row_flag, labels.data<int32_t>(), rows, s.totals};
    RETURN_IF_ERROR(Launch(logits, labels, grad_scale, dlogits, s, totals, ctx->stream()));
    return ReadTotals(ctx, s, logits.dim(1));
  }

 protected:
  virtual absl::Status Launch(const Tensor& z, const Tensor& y, float grad_scale, Tensor* dz,
                              const Scratch& s, const LossTotalsFn& totals,
                              cudaStream_t stream) = 0;

 private:
  int index_;
};

class CudaSoftmaxCrossEntropy final : public CudaLoss {
 public:
  CudaSoftmaxCrossEntropy(float label_smoothing, int index)
      : CudaLoss(index), eps_(label_smoothing) {}
  const char* name() const override { return "softmax_cross_entropy"; }

 protected:
  absl::Status Launch(const Tensor& z, const Tensor& y, float grad_scale, Tensor* dz,
                      const Scratch& s, const LossTotalsFn& totals, cudaStream_t stream) override {
    SoftmaxXentRowFn f{z.data<float>(),
                       y.data<int32_t>(),
                       dz != nullptr ? dz->data<float>() : nullptr,
                       z.dim(1),
                       eps_,
                       0.0,
                       0.0,
                       grad_scale,
                       s.row_loss,
                       s.row_flag};
    f.SetTargets();
    return LaunchSoftmaxXent(f, z.dim(0), totals, stream);
  }

 private:
  const float eps_;
};

class CudaMeanSquaredError final : public CudaLoss {
 public:
  explicit CudaMeanSquaredError(int index) : CudaLoss(index) {}
  const char* name() const override { return "mse"; }

 protected:
  absl::Status Launch(const Tensor& z, const Tensor& y, float grad_scale, Tensor* dz,
                      const Scratch& s, const LossTotalsFn& totals, cudaStream_t stream) override {
    const int64_t k = z.dim(1);
    const MseRowFn f{z.data<float>(),
                     y.data<int32_t>(),
                     dz != nullptr ? dz->data<float>() : nullptr,
                     k,
                     MseDScale(grad_scale, k),
                     s.row_loss,
                     s.row_flag};
    return LaunchMse(f, z.dim(0), totals, stream);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Loss>> CreateCudaLoss(const std::string& name, float label_smoothing,
                                                     int index) {
  // As CreateLoss (engine/losses/loss.cc), which checked label_smoothing's range.
  if (name.empty() || name == "softmax_cross_entropy") {
    return std::unique_ptr<Loss>(new CudaSoftmaxCrossEntropy(label_smoothing, index));
  }
  if (name == "mse") {
    if (label_smoothing != 0.0f) {
      return absl::InvalidArgumentError(
          "training.label_smoothing: only for loss softmax_cross_entropy, not 'mse'");
    }
    return std::unique_ptr<Loss>(new CudaMeanSquaredError(index));
  }
  return absl::InvalidArgumentError(absl::StrCat("training.loss: unknown loss '", name,
                                                 "' (known: ", absl::StrJoin(KnownLosses(), ", "),
                                                 ")"));
}

}  // namespace yoke::engine::cuda
